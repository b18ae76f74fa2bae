"""Weight transports: rank 0 of the collective that carries weight bytes to generation servers."""
