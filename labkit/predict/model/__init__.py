"""The model, in numbers: the architecture record (``arch``, its MoE and
MLA fields in ``arch_moe``), Hugging Face ``config.json`` reading
(``hf_config``, ``hf_fields``, ``hf_config_moe``; the block variants of
Gemma, Phi, OLMo, gpt-oss and Llama 3.2 Vision in ``families``),
parameters tensor by
tensor (``params``, ``params_moe``), FLOPs and MFU (``flops``,
``flops_arch``) and the planner's model shapes (``shapes``). Pure Python:
imports only the standard library and ``labkit.predict.gpus``.
"""
