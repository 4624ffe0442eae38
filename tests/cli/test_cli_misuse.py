"""Every misuse of the command line: exit status 2, exactly one line on stderr
that says what is wrong, no traceback, nothing on stdout and no file written. Only valid input
exits 0. Run in-process through `attnviz.cli.main` (fast); a few cases in a subprocess prove that no
traceback reaches a real stderr."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from attnviz.cli import main
from tiny import tiny_llama, tiny_text_model

TB = ["--model", "attnviz-textbook"]  # built in, loads in milliseconds: 2 layers x 3 heads, 42 ids
OUT_NPZ = ["--out", "{out}/a.npz"]

# (id, argv, the one line on stderr must match this regex). {tmp}: prepared files (fixture `where`);
# {out}: an empty folder that must stay empty; {ids}: a model without tokenizer.json; {bytes}: a
# byte-level decoder without BOS (like SmolLM2: an empty text is no tokens).
MISUSE = [
    # -- attnviz (the window launcher) and the command itself
    ("unknown-command", ["nope"], r"invalid choice: 'nope'"),
    ("unknown-option", ["--bogus"], r"unrecognized arguments: --bogus"),
    ("launcher-model-missing-value", ["--model"], r"argument --model: expected one argument"),
    ("launcher-unknown-model", ["--model", "no-such-model-xyz"], r"no model named 'no-such-model-xyz'"),
    ("launcher-missing-path", ["--model", "{tmp}/nope/model"], r"no model folder at .*nope/model"),
    ("launcher-pickle", ["--model", "{tmp}/pytorch_model.bin"], r"pickle checkpoint.*never unpickles"),
    ("launcher-args-before-command", ["--model", "attnviz-textbook", "heads", "--probe"],
     r"--model before the command opens the window; put it after it: attnviz heads --model"),
    ("launcher-text-before-command", ["--text", "a", "models"], r"--text before the command"),
    # -- models
    ("models-extra-argument", ["models", "extra"],
     r"^attnviz models: error: unrecognized arguments: extra \(see attnviz models --help\)$"),
    ("attention-unknown-option", ["attention", *TB, "--text", "a", "--nope", "1", *OUT_NPZ],
     r"^attnviz attention: error: unrecognized arguments: --nope 1 \(see attnviz attention --help\)$"),
    # -- attention: sources
    ("attention-text-and-ids", ["attention", *TB, "--text", "a", "--ids", "1", *OUT_NPZ],
     r"argument --ids: not allowed with argument --text"),
    ("attention-no-source", ["attention", *TB, *OUT_NPZ], r"one of the arguments --text --ids is required"),
    ("attention-no-out", ["attention", *TB, "--text", "a"], r"required: --out"),
    ("ids-empty", ["attention", *TB, "--ids", "", *OUT_NPZ], r"--ids '' holds no token ids"),
    ("ids-blank", ["attention", *TB, "--ids", "  ", *OUT_NPZ], r"holds no token ids"),
    ("ids-only-commas", ["attention", *TB, "--ids", ",,,", *OUT_NPZ], r"--ids ',,,' holds no token ids"),
    ("ids-empty-item", ["attention", *TB, "--ids", "1,,2", *OUT_NPZ],
     r"--ids '1,,2' has an empty item at position 1"),
    ("ids-trailing-comma", ["attention", *TB, "--ids", "1,2,", *OUT_NPZ], r"empty item at position 2"),
    ("ids-not-integer", ["attention", *TB, "--ids", "1,x", *OUT_NPZ], r"'x' at position 1 is not an integer"),
    ("ids-float", ["attention", *TB, "--ids", "1.5", *OUT_NPZ], r"'1.5' at position 0 is not an integer"),
    ("ids-unicode-digit", ["attention", *TB, "--ids", "٣", *OUT_NPZ], r"is not an integer"),
    ("ids-negative", ["attention", *TB, "--ids", "-1", *OUT_NPZ],
     r"token id -1 at position 0 is outside this model's vocabulary 0\.\.41"),
    ("ids-beyond-vocab", ["attention", *TB, "--ids", "3,42", *OUT_NPZ],
     r"token id 42 at position 1 is outside this model's vocabulary 0\.\.41"),
    ("ids-huge", ["attention", *TB, "--ids", "9" * 30, *OUT_NPZ], r"too large to be a token id"),
    ("ids-too-many", ["attention", *TB, "--ids", ",".join(["5"] * 70), *OUT_NPZ],
     r"sequence of 70 tokens is longer than this model's 64 positions: shorten the text, or give "
     r"--truncate to cut it to 64 tokens$"),
    ("text-too-long", ["attention", *TB, "--text", "the " * 70, *OUT_NPZ],
     r"sequence of 71 tokens is longer than this model's 64 positions"),
    ("text-empty-on-a-decoder-without-bos", ["attention", "--model", "{bytes}", "--text", "", *OUT_NPZ],
     r"the text gives no tokens; type something"),
    ("text-on-a-model-without-tokenizer", ["attention", "--model", "{ids}", "--text", "hello", *OUT_NPZ],
     r"has no tokenizer\.json: type token ids instead"),
    ("empty-typed-ids", ["attention", "--model", "{ids}", "--text", "", *OUT_NPZ], r"type token ids"),
    # -- attention: --out and --model
    ("out-wrong-suffix", ["attention", *TB, "--text", "a", "--out", "{out}/a.txt"],
     r"--out must end in \.npz, got 'a\.txt'"),
    ("out-no-name", ["attention", *TB, "--text", "a", "--out", "{out}/"], r"--out must end in \.npz"),
    ("out-missing-folder", ["attention", *TB, "--text", "a", "--out", "{out}/no/dir/a.npz"],
     r"the folder .*no/dir does not exist"),
    ("out-parent-is-a-file", ["attention", *TB, "--text", "a", "--out", "{tmp}/file.txt/a.npz"],
     r"the folder .*file\.txt is not a folder"),
    ("out-is-a-folder", ["attention", *TB, "--text", "a", "--out", "{tmp}/dir.npz"],
     r"is a folder, not a file"),
    ("out-is-a-fifo", ["attention", *TB, "--text", "a", "--out", "{tmp}/fifo.npz"], r"not a regular file"),
    # -- quantize (the type and --out checked before the model is read)
    ("quantize-unknown-type", ["quantize", *TB, "--type", "Q3_K", "--out", "{out}/m.gguf"],
     r"cannot quantize to 'Q3_K': the types are Q8_0, Q5_1, Q5_0, Q4_1, Q4_0, F16, BF16, F32"),
    ("quantize-no-out", ["quantize", *TB, "--type", "Q8_0"], r"required: --out"),
    ("quantize-out-wrong-suffix", ["quantize", *TB, "--type", "Q8_0", "--out", "{out}/m.bin"],
     r"--out must end in \.gguf, got 'm\.bin'"),
    ("quantize-out-missing-folder", ["quantize", *TB, "--type", "Q8_0", "--out", "{out}/no/m.gguf"],
     r"the folder .*no does not exist"),
    ("quantize-out-parent-is-a-file", ["quantize", *TB, "--type", "Q8_0", "--out", "{tmp}/file.txt/m.gguf"],
     r"the folder .*file\.txt is not a folder"),
    ("quantize-unknown-model", ["quantize", "--model", "no-such-model-xyz", "--type", "Q8_0", "--out",
                                "{out}/m.gguf"], r"no model named 'no-such-model-xyz'"),
    ("quantize-a-family-gguf-cannot-hold", ["quantize", *TB, "--type", "Q8_0", "--out", "{out}/m.gguf"],
     r"a gpt2 model is not written to GGUF"),
    # -- compare (--ids and --out checked before any model is read; B refused in one line)
    ("compare-no-b", ["compare", *TB, "--ids", "1,2"], r"give model B: --against B, --quantize TYPE"),
    ("compare-b-and-quantize", ["compare", *TB, "--against", "x", "--quantize", "Q8_0", "--ids", "1"],
     r"not allowed with argument"),
    ("compare-bad-ids", ["compare", *TB, "--against", "x", "--ids", "1,,2"], r"empty item at position 1"),
    ("compare-out-wrong-suffix", ["compare", *TB, "--against", "x", "--ids", "1,2", "--out", "{out}/m.txt"],
     r"--out must end in \.csv, \.json, \.png"),
    ("compare-unknown-b", ["compare", *TB, "--against", "no-such-model-xyz", "--ids", "1,2"],
     r"Could not load model B \(no-such-model-xyz\)\. No model named 'no-such-model-xyz'"),
    ("compare-unknown-type", ["compare", *TB, "--quantize", "Q3_K", "--ids", "1,2"],
     r"quantized to Q3_K\. Cannot quantize to 'Q3_K'"),
    # a threshold no strength reaches, or every one does, is refused before JSON could hold NaN
    *[(f"compare-threshold-{v}", ["compare", *TB, "--against-checkpoint", "0", "--probe", "--json",
                                  f"--threshold={v}"], rf"argument --threshold: must be a number in \(0, 1\], got {v} \(see")
      for v in ("nan", "inf", "-inf", "-0.5", "0", "1.5")],
    ("compare-threshold-word", ["compare", *TB, "--against", "x", "--probe", "--threshold", "half"],
     r"argument --threshold: expected a number, got 'half'"),
    # -- scan and scan-report (the corpus and the folder checked before anything is written)
    ("scan-no-corpus", ["scan", *TB, "--out", "{out}/s"], r"required: --corpus"),
    ("scan-binary-corpus", ["scan", *TB, "--corpus", "{tmp}/pytorch_model.bin", "--out", "{out}/s"],
     r"a corpus is a \.txt, \.jsonl, \.parquet file, not \.bin"),
    ("scan-missing-corpus", ["scan", *TB, "--corpus", "{tmp}/nope.txt", "--out", "{out}/s"],
     r"corpus .*nope\.txt: no such file"),
    ("scan-workers-and-scheduler", ["scan", *TB, "--corpus", "c.txt", "--out", "{out}/s",
                                    "--workers", "2", "--scheduler", "tcp://127.0.0.1:1"],
     r"--workers sizes the LocalCluster"),
    ("scan-batch-zero", ["scan", *TB, "--corpus", "c.txt", "--out", "{out}/s", "--batch", "0"],
     r"argument --batch: must be a positive integer"),
    ("scan-report-not-a-scan", ["scan-report", "{out}"], r"is not a scan folder: it has no scan\.json"),
    ("scan-report-png-suffix", ["scan-report", "{out}", "--png", "{out}/a.jpg"],
     r"--png must end in \.png, got a\.jpg"),
    ("model-unknown-name", ["attention", "--model", "no-such-model-xyz", "--text", "a", *OUT_NPZ],
     r"no model named 'no-such-model-xyz'.*attnviz models"),
    ("model-missing-folder", ["attention", "--model", "{tmp}/nope/", "--text", "a", *OUT_NPZ],
     r"no model folder at"),
    ("model-empty-folder", ["attention", "--model", "{tmp}/empty", "--text", "a", *OUT_NPZ],
     r"empty is not a model folder: it has no config\.json"),
    ("model-pickle", ["attention", "--model", "{tmp}/pytorch_model.bin", "--text", "a", *OUT_NPZ],
     r"pickle"),
    # -- heads
    ("heads-no-source", ["heads", *TB], r"one of the arguments --text --probe is required"),
    ("heads-text-and-probe", ["heads", *TB, "--text", "a", "--probe"], r"not allowed with argument"),
    ("probe-length-negative", ["heads", *TB, "--probe", "--probe-length", "-1"],
     r"argument --probe-length: must be an integer >= 2, got -1"),
    ("probe-length-zero", ["heads", *TB, "--probe", "--probe-length", "0"],
     r"must be an integer >= 2, got 0"),
    ("probe-length-one", ["heads", *TB, "--probe", "--probe-length", "1"], r">= 2, got 1"),
    ("probe-length-not-a-number", ["heads", *TB, "--probe", "--probe-length", "abc"],
     r"argument --probe-length: expected an integer, got 'abc'"),
    ("seed-negative", ["heads", *TB, "--probe", "--seed", "-1"], r"argument --seed: must be an integer >= 0"),
    ("probe-options-without-probe", ["heads", *TB, "--text", "a", "--probe-length", "5", "--seed", "3"],
     r"--probe-length and --seed apply only with --probe"),
    ("truncate-with-probe", ["heads", *TB, "--probe", "--truncate"], r"--truncate applies to --text"),
    ("probe-unknown-kind", ["heads", *TB, "--probe", "semantic"], r"argument --probe: invalid choice: 'semantic'"),
    ("probe-length-with-template", ["heads", *TB, "--probe", "syntactic", "--probe-length", "5"],
     r"--probe-length applies to --probe repeat"),
    ("template-probe-exclusions", ["heads", *TB, "--probe", "coreference", "--exclude-bos"],
     r"apply to role scores, not to the coreference probe"),
    ("template-probe-unknown-words", ["heads", *TB, "--probe", "coreference"],
     r"too few coreference items are single, known tokens"),
    ("heads-text-too-long", ["heads", *TB, "--text", "the " * 70], r"longer than this model's 64"),
    ("heads-model-pickle", ["heads", "--model", "{tmp}/pytorch_model.bin", "--probe"], r"pickle"),
    # -- find
    ("find-no-to", ["find", *TB, "--text", "the cat", "--from", "cat"], r"required: --to"),
    ("find-top-zero", ["find", *TB, "--text", "the cat", "--from", "cat", "--to", "the", "--top", "0"],
     r"argument --top: must be a positive integer, got 0"),
    ("find-top-negative", ["find", *TB, "--text", "a b", "--from", "a", "--to", "b", "--top", "-3"],
     r"must be a positive integer, got -3"),
    ("find-token-not-in-text", ["find", *TB, "--text", "the cat", "--from", "dog", "--to", "the"],
     r"token 'dog' is not in the text; its 3 tokens are"),
    ("find-position-out-of-range", ["find", *TB, "--text", "the cat", "--from", "the@9", "--to", "the"],
     r"position 9 in 'the@9' is outside the 3 tokens"),
    ("find-empty-text-on-decoder", ["find", "--model", "{bytes}", "--text", "", "--from", "a", "--to", "b"],
     r"type something"),
    ("attention-rows-empty", ["attention", *TB, "--text", "the cat", "--rows", "3:3", *OUT_NPZ],
     r"--rows '3:3': give a block of query rows as A:B"),
    ("attention-rows-past-the-text", ["attention", *TB, "--text", "the cat", "--rows", "0:9", *OUT_NPZ],
     r"--rows 0:9 runs past the text's 3 tokens"),
    # -- generate
    ("generate-no-max-new", ["generate", *TB, "--text", "the cat"], r"required: --max-new"),
    ("generate-negative-temperature", ["generate", *TB, "--text", "the cat", "--max-new", "2",
                                       "--temperature", "-1"], r"temperature must be >= 0"),
    ("generate-tiny-temperature", ["generate", *TB, "--text", "the cat", "--max-new", "2",
                                   "--temperature", "1e-310"], r"temperature must be 0 \(greedy\) or at least 1e-300"),
    ("generate-negative-seed", ["generate", *TB, "--text", "the cat", "--max-new", "2", "--temperature",
                                "1", "--seed=-1"], r"argument --seed: must be an integer >= 0, got -1"),
    ("generate-top-p-zero", ["generate", *TB, "--text", "the cat", "--max-new", "2", "--top-p", "0"],
     r"top-p must be in \(0, 1\]"),
    # -- predict and ablation-scan
    ("predict-no-source", ["predict", *TB], r"one of the arguments --text --ids is required"),
    ("predict-position-out-of-range", ["predict", *TB, "--text", "the cat", "--position", "9"],
     r"position 9 is outside the 3 tokens"),
    ("predict-ablate-outside", ["predict", *TB, "--text", "the cat", "--ablate", "5.0"],
     r"head 5\.0 is outside this model's layers 0\.\.1"),
    ("predict-ablate-mode-alone", ["predict", *TB, "--text", "the cat", "--ablate-mode", "mean"],
     r"--ablate-mode applies only with --ablate"),
    ("predict-knockout-future", ["predict", *TB, "--text", "the cat sat", "--knockout", "0:1-3"],
     r"edge 1->3 is not one the query sees"),
    ("predict-target-two-tokens", ["predict", *TB, "--text", "the cat", "--target", "the cat"],
     r"'the cat' is 2 tokens"),
    ("scan-no-source", ["ablation-scan", *TB], r"one of the arguments --text --ids --probe is required"),
    ("scan-repeat-without-repeat", ["ablation-scan", *TB, "--text", "the cat sat", "--loss", "repeat"],
     r"the ids do not repeat"),
    ("scan-position-with-repeat", ["ablation-scan", *TB, "--probe", "--position", "1"],
     r"--position applies only with --loss next"),
    # -- patch
    ("patch-no-corrupt", ["patch", *TB, "--clean", "the cat", "--what", "resid"],
     r"one of the arguments --corrupt --ids-corrupt is required"),
    ("patch-no-what", ["patch", *TB, "--clean", "the cat", "--corrupt", "the dog"],
     r"the following arguments are required: --what"),
    ("patch-lengths", ["patch", *TB, "--clean", "the cat", "--corrupt", "the cat sat", "--what", "resid"],
     r"the clean text is 3 tokens and the corrupted text 4: patching needs texts of one length"),
    ("patch-same-texts", ["patch", *TB, "--clean", "the cat", "--corrupt", "the cat", "--what", "resid"],
     r"the clean and corrupted texts are the same 3 tokens: patching needs a corrupted text that differs"),
    ("patch-position", ["patch", *TB, "--clean", "the cat", "--corrupt", "the dog", "--what", "resid",
                        "--position", "3"], r"position 3 is outside the 3 tokens"),
    ("patch-unknown-target", ["patch", *TB, "--clean", "the cat", "--corrupt", "the dog", "--what",
                              "resid", "--target", "the cat"], r"'the cat' is 2 tokens"),
    ("patch-encoder", ["patch", "--model", "all-MiniLM-L6-v2", "--clean", "a", "--corrupt", "b",
                       "--what", "resid"], r"is an encoder, so it predicts no next token.*`attnviz patch` needs a causal language model"),
    # -- qk-attribution and circuits
    ("qk-key-after-query", ["qk-attribution", *TB, "--text", "the cat sat", "--layer", "1",
                            "--head", "0", "--query", "1", "--key", "3"], r"key 3 comes after query 1"),
    ("qk-query-out-of-range", ["qk-attribution", *TB, "--text", "the cat", "--layer", "1", "--head",
                               "0", "--query", "5", "--key", "0"], r"query position 5 is outside the 3 tokens"),
    ("qk-layer-outside", ["qk-attribution", *TB, "--text", "the cat", "--layer", "2", "--head", "0",
                          "--query", "1", "--key", "0"], r"layer 2 is outside this model's layers 0\.\.1"),
    # a text too long: only "shorten the text" where the command has no --truncate to offer
    ("patch-text-too-long", ["patch", *TB, "--clean", "the " * 70, "--corrupt", "a " + "the " * 69,
                             "--what", "resid"], r"64 positions: shorten the text$"),
    ("qk-text-too-long", ["qk-attribution", *TB, "--text", "the " * 70, "--layer", "1", "--head", "0",
                          "--query", "1", "--key", "0"], r"64 positions: shorten the text$"),
    ("compare-probe-truncate", ["compare", *TB, "--against", "attnviz-textbook", "--probe", "--truncate"],
     r"--truncate applies to --text and --ids \(the probe is always cut to fit\)"),
    ("predict-text-too-long", ["predict", *TB, "--text", "the " * 70], r"64 positions: shorten the text$"),
    ("circuits-top-zero", ["circuits", *TB, "--head", "1.0", "--token", "cat", "--top", "0"],
     r"argument --top: must be a positive integer, got 0"),
    ("circuits-head-alone", ["circuits", *TB, "--head", "1.0"], r"--head and --token go together"),
    ("circuits-bad-token", ["circuits", *TB, "--head", "1.0", "--token", "the cat"], r"'the cat' is 2 tokens"),
    # -- export
    ("export-head-without-layer", ["export", *TB, "--head", "0", "--out", "{out}/h.npy"],
     r"--head needs --layer"),
    ("export-layer-negative", ["export", *TB, "--layer", "-1", "--out", "{out}/h.npy"],
     r"argument --layer: must be an integer >= 0, got -1"),
    ("export-layer-not-a-number", ["export", *TB, "--layer", "x", "--out", "{out}/h.npy"],
     r"argument --layer: expected an integer, got 'x'"),
    ("export-layer-out-of-range", ["export", *TB, "--layer", "9", "--out", "{out}/h.npy"],
     r"layer 9 is out of range: attnviz-textbook has 2 layers \(0\.\.1\)"),
    ("export-head-out-of-range", ["export", *TB, "--layer", "0", "--head", "3", "--out", "{out}/h.npy"],
     r"head 3 is out of range: attnviz-textbook has 3 heads per layer \(0\.\.2\)"),
    ("export-width-zero", ["export", *TB, "--width", "0", "--out", "{out}/h.png"],
     r"--width 0 is outside 300\.\.12000 pixels"),
    ("export-width-negative", ["export", *TB, "--width", "-5", "--out", "{out}/h.png"],
     r"--width -5 is outside"),
    ("export-width-huge", ["export", *TB, "--width", "100000", "--out", "{out}/h.svg"],
     r"outside 300\.\.12000"),
    ("export-width-not-a-number", ["export", *TB, "--width", "wide", "--out", "{out}/h.png"],
     r"argument --width: invalid int value: 'wide'"),
    ("export-width-on-numbers", ["export", *TB, "--width", "800", "--out", "{out}/h.npy"],
     r"--width applies only to \.png and \.svg images, not \.npy"),
    ("export-image-options-on-numbers", ["export", *TB, "--colormap", "magma", "--scale", "per-head",
                                         "--out", "{out}/h.csv"], r"--colormap, --scale apply only to"),
    ("export-unknown-colormap", ["export", *TB, "--colormap", "nope", "--out", "{out}/h.png"],
     r"unknown colormap 'nope'"),
    ("export-empty-colormap", ["export", *TB, "--colormap", "", "--out", "{out}/h.png"],
     r"unknown colormap ''"),
    ("export-bad-scale", ["export", *TB, "--scale", "log", "--out", "{out}/h.png"],
     r"argument --scale: invalid choice: 'log'"),
    ("export-out-suffix", ["export", *TB, "--out", "{out}/h.gif"],
     r"--out must end in \.png, \.svg, \.npy, \.csv, \.json, got 'h\.gif'"),
    ("export-out-missing-folder", ["export", *TB, "--out", "{out}/no/h.png"], r"no does not exist"),
    ("export-out-is-a-folder", ["export", *TB, "--out", "{tmp}/dir.png"], r"is a folder, not a file"),
    ("export-hide-first-of-one-token", ["export", *TB, "--text", "", "--hide-first", "--out", "{out}/h.npy"],
     r"cannot hide the first token: the text has only 1 token"),
    ("export-unknown-model", ["export", "--model", "no-such-model-xyz", "--out", "{out}/h.npy"],
     r"no model named"),
    ("export-empty-text-on-decoder", ["export", "--model", "{bytes}", "--text", "", "--out", "{out}/h.npy"],
     r"type something"),
    # -- calc
    ("calc-nothing", ["calc"], r"give --preset ID, --config PATH, or at least --d-model"),
    ("calc-not-a-number", ["calc", "--d-model", "abc"], r"argument --d-model: expected an integer, got 'abc'"),
    ("calc-zero", ["calc", "--d-model", "0", "--n-heads", "1", "--n-layers", "1"],
     r"argument --d-model: must be a positive integer, got 0"),
    ("calc-negative-seq-len", ["calc", "--preset", "llama-3-8b", "--seq-len", "-1"],
     r"argument --seq-len: must be a positive integer, got -1"),
    ("calc-zero-batch", ["calc", "--preset", "gpt2", "--batch", "0"],
     r"argument --batch: must be a positive integer, got 0"),
    ("calc-heads-do-not-divide", ["calc", "--d-model", "64", "--n-heads", "3", "--n-layers", "1"],
     r"--n-heads \(3\) does not divide --d-model \(64\)"),
    ("calc-kv-heads-do-not-divide", ["calc", "--preset", "llama-3-8b", "--n-kv-heads", "3"],
     r"--n-kv-heads \(3\) does not divide n_head \(32\)"),
    ("calc-unknown-preset", ["calc", "--preset", "nope"], r"unknown preset 'nope'; known: gpt2"),
    ("calc-preset-and-config", ["calc", "--preset", "gpt2", "--config", "x"], r"not allowed with argument"),
    ("calc-bad-kv-dtype", ["calc", "--preset", "gpt2", "--kv-dtype", "fp3"], r"invalid choice: 'fp3'"),
    ("calc-list-presets-with-flags", ["calc", "--list-presets", "--preset", "gpt2"],
     r"--list-presets takes no other flags but --json \(got --preset\)"),
    ("calc-window-layers-empty-item", ["calc", "--preset", "llama-3-8b", "--sliding-window", "100",
                                       "--sliding-window-layers", "1,,2"], r"expected all, even, odd"),
    ("calc-window-layers-negative", ["calc", "--preset", "llama-3-8b", "--sliding-window", "100",
                                     "--sliding-window-layers", "-1"], r"expected all, even, odd"),
    ("calc-window-layer-out-of-range", ["calc", "--preset", "llama-3-8b", "--sliding-window", "100",
                                        "--sliding-window-layers", "99"],
     r"--sliding-window-layers names layer 99, but the model has 32"),
    ("calc-window-layers-without-window",
     ["calc", "--preset", "llama-3-8b", "--sliding-window-layers", "odd"],
     r"--sliding-window-layers 'odd' given without a sliding_window size"),
    ("calc-config-missing", ["calc", "--config", "{tmp}/nope.json"],
     r"cannot read .*nope\.json: no such file"),
    ("calc-config-folder-without-config", ["calc", "--config", "{tmp}/empty"],
     r"cannot read .*empty/config\.json: no such file"),
    ("calc-config-pickle", ["calc", "--config", "{tmp}/pytorch_model.bin"],
     r"pytorch_model\.bin is not UTF-8 text \(byte 0 cannot be decoded\)"),
    ("calc-config-not-json", ["calc", "--config", "{tmp}/notjson.json"],
     r"notjson\.json is not valid JSON: Expecting property name .* at line 1 column 2"),
    ("calc-config-a-list", ["calc", "--config", "{tmp}/list.json"],
     r"list\.json holds a list, expected a JSON object"),
    ("calc-config-too-big", ["calc", "--config", "{tmp}/big"],
     r"big/config\.json is 16,777,217 bytes, expected at most 16,777,216 for a config\.json"),
    ("calc-config-wrong-type", ["calc", "--config", "{tmp}/badtype.json"],
     r"d_model must be a whole number, got 'x'"),
    ("calc-config-fifo", ["calc", "--config", "{tmp}/fifo.json"], r"not a regular file"),
]

VALID = [  # only these exit 0
    ("attention-ids", ["attention", *TB, "--ids", " 1, 2 ,3", *OUT_NPZ]),
    ("attention-empty-text-with-bos", ["attention", *TB, "--text", "", *OUT_NPZ]),
    ("attention-typed-ids", ["attention", "--model", "{ids}", "--text", "3, 7", *OUT_NPZ]),
    ("heads-probe", ["heads", *TB, "--probe", "--probe-length", "2", "--seed", "0"]),
    ("find-top", ["find", *TB, "--text", "the cat", "--from", "cat", "--to", "the", "--top", "1"]),
    ("export-numbers", ["export", *TB, "--layer", "1", "--out", "{out}/h.npy"]),
    ("predict-ablated", ["predict", *TB, "--text", "the cat", "--ablate", "1.0", "--json"]),
    ("generate-json", ["generate", *TB, "--text", "the cat", "--max-new", "2", "--ignore-eos", "--json"]),
    ("scan-probe", ["ablation-scan", *TB, "--probe", "--json"]),
    ("patch-json", ["patch", *TB, "--clean", "the cat", "--corrupt", "the dog", "--what", "head_out", "--json"]),
    ("qk-attribution", ["qk-attribution", *TB, "--text", "the cat sat", "--layer", "1", "--head", "0",
                        "--query", "3", "--key", "2", "--json"]),
    ("circuits-ov-top", ["circuits", *TB, "--head", "0.0", "--token", "cat", "--json"]),
    ("calc-preset", ["calc", "--preset", "gpt2", "--seq-len", "16"]),
    ("calc-list", ["calc", "--list-presets", "--json"]),
    ("quantize-q8_0", ["quantize", "--model", "{bytes}", "--type", "q8_0", "--out", "{out}/m.gguf"]),
    ("compare-itself", ["compare", *TB, "--against", "attnviz-textbook", "--text", "the cat"]),
]


@pytest.fixture(scope="module")
def where(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")
    (tmp / "empty").mkdir()
    (tmp / "file.txt").write_text("not a folder")
    (tmp / "dir.npz").mkdir()
    (tmp / "dir.png").mkdir()
    os.mkfifo(tmp / "fifo.npz")
    os.mkfifo(tmp / "fifo.json")
    (tmp / "notjson.json").write_text("{hidden_size: 1")
    (tmp / "list.json").write_text("[1, 2]")
    (tmp / "big").mkdir()
    with open(tmp / "big" / "config.json", "wb") as big:  # sparse: one byte past the cap, none written
        big.truncate((16 << 20) + 1)
    (tmp / "badtype.json").write_text('{"hidden_size": "x", "num_attention_heads": 2, '
                                      '"num_hidden_layers": 1}')
    return {"tmp": str(tmp), "ids": str(tiny_llama(tmp / "ids-model")),
            "bytes": str(tiny_text_model(tmp / "bytes-model"))}


@pytest.fixture
def no_window(monkeypatch):
    """The launcher must refuse before a window opens: opening one fails the test."""
    import attnviz.ui.app

    def refuse(**_kw):
        raise AssertionError("a window was opened")
    monkeypatch.setattr(attnviz.ui.app, "run_app", refuse)


def run_cli(argv, capsys):
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def fill(argv, where, out):
    return [a.format(out=out, **where) for a in argv]


@pytest.mark.parametrize("argv, expected", [pytest.param(a, e, id=i) for i, a, e in MISUSE])
def test_misuse_exits_2_with_one_line(argv, expected, where, tmp_path, capsys, no_window):
    rc, out, err = run_cli(fill(argv, where, tmp_path), capsys)
    lines = err.splitlines()
    assert rc == 2, (rc, err)
    assert len(lines) == 1 and "Traceback" not in err, err
    assert re.search(expected, lines[0]), lines[0]
    assert re.match(r"attnviz( [\w-]+)?: error: ", lines[0]), lines[0]
    assert out == ""
    assert list(tmp_path.iterdir()) == []  # nothing written, not even a temporary file


def test_the_table_covers_every_subcommand():
    from attnviz.cli import build_parser

    commands = set(build_parser().commands)
    covered = {argv[0] for _, argv, _ in MISUSE if not argv[0].startswith("-")}
    assert commands <= covered, commands - covered
    assert any(argv[0].startswith("--") for _, argv, _ in MISUSE)  # the launcher's own arguments


@pytest.mark.parametrize("argv", [pytest.param(a, id=i) for i, a in VALID])
def test_valid_input_exits_0(argv, where, tmp_path, capsys):
    rc, out, err = run_cli(fill(argv, where, tmp_path), capsys)
    assert rc == 0 and err == "", err
    assert out.strip()


def test_attention_npz_of_truncated_ids(where, tmp_path, capsys):
    rc, _, err = run_cli(["attention", *TB, "--ids", ",".join(["5"] * 70), "--truncate",
                          "--out", str(tmp_path / "a.npz")], capsys)
    assert rc == 0 and err == ("attnviz attention: note: the text is 70 tokens; read its first 64 tokens "
                               "(--truncate)\n"), err
    data = np.load(tmp_path / "a.npz")
    assert data["input_ids"].tolist() == [5] * 64 and data["attentions"].shape == (2, 3, 64, 64)


def test_lone_surrogates_in_text_run_with_a_note(tmp_path, capsys):
    rc, out, err = run_cli(["attention", *TB, "--text", "the\udcff cat", "--out",
                            str(tmp_path / "a.npz")], capsys)
    assert rc == 0 and out.startswith(str(tmp_path / "a.npz"))
    assert err == ("attnviz attention: note: 1 lone surrogate (U+D800..U+DFFF, not characters) "
                   "replaced by U+FFFD \ufffd\n")


def test_multi_line_errors_are_printed_as_one_line(monkeypatch, capsys):
    import attnviz.commands.heads_cmd as heads_cmd
    from attnviz.engine import ModelLoadError

    def broken(_name, **_kw):  # (load_model also takes the text)
        raise ModelLoadError("first line\n  second line\n")
    monkeypatch.setattr(heads_cmd, "load_model", broken)
    rc, _, err = run_cli(["heads", "--probe"], capsys)
    assert rc == 2 and err == "attnviz heads: error: first line second line\n"


def test_an_internal_error_is_one_line_and_exit_1(monkeypatch, capsys):
    import attnviz.commands.heads_cmd as heads_cmd

    def bug(_name, **_kw):
        raise KeyError("gelu_pytorch_tanh")
    monkeypatch.setattr(heads_cmd, "load_model", bug)
    rc, out, err = run_cli(["heads", "--probe"], capsys)
    assert rc == 1 and out == ""
    assert err == ("attnviz heads: internal error: KeyError: 'gelu_pytorch_tanh' "
                   "(rerun with -v for the traceback)\n")
    rc, _, err = run_cli(["-v", "heads", "--probe"], capsys)
    assert rc == 1 and "Traceback" in err  # asked for


# ---- a real process: no traceback reaches stderr -------------------------------------------------

@pytest.mark.parametrize("args, expected", [
    (["attention", *TB, "--ids", "1,,2", "--out", "x.npz"], b"empty item at position 1"),
    (["heads", *TB, "--probe", "--probe-length", "-1"], b"must be an integer >= 2"),
    (["--model", "no-such-model-xyz"], b"no model named"),
])
def test_subprocess_misuse_has_no_traceback(args, expected, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "attnviz", *args], capture_output=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == b""
    assert len(proc.stderr.splitlines()) == 1 and b"Traceback" not in proc.stderr, proc.stderr
    assert expected in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_subprocess_text_that_is_not_utf8(tmp_path):
    """Bytes that are not UTF-8 in argv reach Python as lone surrogates: run with a note, exit 0."""
    proc = subprocess.run([sys.executable, "-m", "attnviz", "attention", *TB, "--text", b"the \xff cat",
                           "--out", "a.npz"], capture_output=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.decode().splitlines() == [
        "attnviz attention: note: 1 lone surrogate (U+D800..U+DFFF, not characters) replaced by "
        "U+FFFD \ufffd"]
    assert np.load(tmp_path / "a.npz")["tokens"].tolist()[:2] == ["<|bos|>", "the"]


@pytest.mark.parametrize("argv", [pytest.param(a, id=i) for i, a in (
    ("attention", ["attention", *TB, "--text", "the " * 70, "--out", "{out}/a.npz"]),
    ("heads", ["heads", *TB, "--text", "the " * 70]),
    ("find", ["find", *TB, "--text", "the cat " + "the " * 70, "--from", "cat", "--to", "the@1"]),
    ("export", ["export", *TB, "--text", "the " * 70, "--out", "{out}/a.csv"]),
    ("compare-text", ["compare", *TB, "--against", "attnviz-textbook", "--text", "the " * 70]),
    ("compare-ids", ["compare", *TB, "--against", "attnviz-textbook", "--ids", ",".join(["5"] * 70)]),
)])
def test_the_truncate_a_too_long_text_is_told_to_use_is_this_commands_own(argv, where, tmp_path, capsys):
    rc, _, err = run_cli(fill(argv, where, tmp_path), capsys)
    assert rc == 2 and err.rstrip().endswith("shorten the text, or give --truncate to cut it to 64 tokens"), err
    rc, _, err = run_cli(fill(argv, where, tmp_path) + ["--truncate"], capsys)
    assert rc == 0, err
