"""Layer 5, one job's life: a cell's run (:mod:`.cell`), a partition's job (:mod:`.partition_job`),
checkpoints (:mod:`.checkpoint`), provenance (:mod:`.provenance`), a tuned run's reuse of a
paper-setting run (:mod:`.reuse`), live tracking (:mod:`.tracking`).  May import layers 0-5."""
