"""Layer 5, one job's life: the job a cell's training receives (:mod:`.job`), its run's stages
(:mod:`.stages`) on the run's fixed parts and progress (:mod:`.state`), a round's scores
(:mod:`.scoring`), the run's output files (:mod:`.outputs`), a partition's job (:mod:`.partition_job`),
checkpoints (:mod:`.checkpoint`), provenance (:mod:`.provenance`), a tuned run's reuse of a
paper-setting run (:mod:`.reuse`), live tracking (:mod:`.tracking`).  May import layers 0-5."""
