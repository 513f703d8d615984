"""Layer 3, fair tuning: a tune block's trials (:mod:`.trials`) and the selection of a setting from
their validation scores (:mod:`.selection`).  May import layers 0-3."""
