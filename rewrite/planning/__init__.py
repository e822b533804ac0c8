"""Deciding copies: the dataflow terms, the decisions and their reasons, the planner (C1-C10)."""
