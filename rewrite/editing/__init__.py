"""Graph edits shared by the lowering, the hazard guard and the pipeline.

- :mod:`~rewrite.editing.nodes`: create nodes with truthful ``meta['val']`` (the one
  module that writes node metadata, on the nodes it creates);
- :mod:`~rewrite.editing.apply`: the applier of the planner's decisions, all or nothing;
- :mod:`~rewrite.editing.copying`: an independent copy of a program (graph, weights, metadata).
"""
