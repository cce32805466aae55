"""Where a model comes from: the loaders, a layer of their own under models/.

  * sources.py: `parse_source(spec)`, one type per kind of model spec (a saved checkpoint, a paper key, a hub id, a
    GGUF file...), each answering `open()` and `describe()`;
  * files.py: the checkpoint file helpers every loader shares (errors, field checks, shard listing, atomic writes);
  * checkpoint.py: this project's own checkpoints (save, load, the config migrations);
  * hf_format.py, gguf_format.py, llama_layout.py: the transformers and GGUF formats read onto our Llama backbone;
  * pretrained.py: a published model by hub id or GGUF file; dllm.py: the diffusion-LM families it recognises;
  * official.py and paper.py: the papers' own checkpoints (the paper-key registry and downloads in paper.py);
  * tokenizers.py: the tokenizers shipped with the project and those read from a checkpoint.

This package imports nothing at import time: import the module you need (`from models.loading.sources import
parse_source`); `models` re-exports the public entry points (`models.open_model`, `models.load`, `models.save`).
"""
