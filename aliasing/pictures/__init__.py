"""Pictures of an analysis: the storage graph (networkx, Graphviz DOT) and the storage timeline."""
