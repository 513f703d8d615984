"""Layer 0, helpers with no knowledge of federated learning: thread pools (:mod:`.threads`) and the
moved-module aliases (:mod:`.moved`).  Imports nothing of fedbench's."""
