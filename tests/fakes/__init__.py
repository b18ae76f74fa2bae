"""Working in-memory fakes of the ports (one per port), shared by unit and property tests."""
