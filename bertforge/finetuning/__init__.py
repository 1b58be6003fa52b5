"""Layer 8: fine-tuning jobs: `finetune`, `evaluate`, `predict`, task distillation, the suite."""
