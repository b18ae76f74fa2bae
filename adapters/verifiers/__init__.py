"""RLVR verifiers as reward sources: built-ins (`math_verify`, `exact_match`, `format`) and user functions."""
