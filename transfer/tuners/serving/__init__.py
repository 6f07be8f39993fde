"""Serving frameworks' kernel config tables (vLLM's and SGLang's fused-MoE tables): import
(``tables.parse``, format ``vllm-moe``), export (``tables.export``, ``exporting``), a table for a
device or shape without one (``predict``) and its leave-one-device-out measurement (``evaluate``).
See docs/serving_tables.md."""
