"""Layer 8: pre-training jobs: the objectives, the recipes, `pretrain`, general distillation, plots, the demo."""
