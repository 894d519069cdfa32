"""Generator backends behind one small Protocol, selected from a plain registry."""
