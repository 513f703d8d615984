"""Layer 3, what the user wrote: the config files read strictly and checked against the schema
(:mod:`.files`), cells and their resolved specs (:mod:`.cells`), the entries' semantic checks
(:mod:`.checks`) -- from the registries alone, without touching the filesystem.  May import layers 0-3."""
