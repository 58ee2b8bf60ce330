"""Titles in words where a key's value would mislead (rcsim.plot): a run of a pretrained checkpoint
(its [pretrained] section says what ran), and residual.alpha = 0 ("no residual")."""
import os

# What a run of a pretrained checkpoint (rcsim generate --measure) ran is its [pretrained] section;
# its other keys are the main block's settings of those blocks (kernel/llama/llama_block.hpp).
PRETRAINED_TITLE_KEYS = ["model.tokens", "model.layers", "run.trials"]


def no_residual_words(v):
    """residual.alpha = 0 in words: "no residual" (an MLP's own residual.mlp_alpha named when it
    has one); None for any other value (the title's "residual alpha = a")."""
    alpha, mlp_alpha = v.get("residual.alpha"), v.get("residual.mlp_alpha", "auto")
    try:
        if float(alpha) != 0:
            return None
        if mlp_alpha not in ("auto", None) and float(mlp_alpha) != 0 and v.get("mlp.width", "0") != "0":
            return f"attention without residual, MLP residual alpha_M = {mlp_alpha}"
    except (TypeError, ValueError):
        return None
    return "no residual"


def pretrained_words(v):
    """The family and architecture of a pretrained run (its [pretrained] section) in words:
    "stories260K.bin: Llama (llama2.c), RMSNorm, residual, d = 64, 8 heads of size 8 (4 key/value
    heads), SwiGLU hidden 172, pretrained weights"."""
    arch = dict(part.strip().split(" ", 1) for part in v.get("pretrained.architecture", "").split(",") if " " in
                part.strip())
    name = os.path.basename(v.get("pretrained.checkpoint", "")) or "pretrained checkpoint"
    parts = [f"{name}: Llama (llama2.c)", {"rmsnorm": "RMSNorm"}.get(v.get("pretrained.norm"), "no normalisation"),
             "residual"]
    if "dim" in arch and "heads" in arch:
        size = int(arch["dim"]) // max(int(arch["heads"]), 1)
        kv = f" ({arch['kv_heads']} key/value heads)" if arch.get("kv_heads", arch["heads"]) != arch["heads"] else ""
        parts.append(f"d = {arch['dim']}, {arch['heads']} heads of size {size}{kv}")
    if "hidden" in arch:
        parts.append(f"SwiGLU hidden {arch['hidden']}")
    weights = v.get("pretrained.weights")
    if weights:
        parts.append(f"{weights} weights" if weights in ("pretrained", "trained") else f"weights {weights}")
    if "layers" in arch and v.get("pretrained.depth") not in (None, arch["layers"]):
        parts.append(f"its {arch['layers']} blocks repeated")
    return ", ".join(parts)
