"""The models the engine trains: the built-in transformers (``tiny``), Hugging Face models (``hf``),
LoRA adapters (``lora``), their incremental decoders, and ``ModelAdapter`` over all of them (``adapter``; ``factory``
picks the adapter for a model)."""
