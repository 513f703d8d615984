# Stage 1b (FLT only): pretrain a ConvAE encoder on its encoder dataset, one per `encoders` entry.


rule pretrain_encoder:
    output:
        pt=f"{RESULTS}/encoders/{{encoder}}.pt",
        csv=f"{RESULTS}/encoders/{{encoder}}_loss.csv",
        png=report(
            f"{RESULTS}/encoders/{{encoder}}_loss.png",
            caption="../report/encoder_loss.rst",
            category=PLAN.encoder_category,
            subcategory="Encoders",
            labels={"encoder": "{encoder}", "figure": "reconstruction loss vs epoch"},
        ),
    params:
        settings=PLAN.encoder_settings,
    log:
        f"{RESULTS}/logs/encoders/{{encoder}}.log",
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/pretrain_encoder.py"
