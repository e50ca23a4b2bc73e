"""Conformance cases of Muon with its auxiliary AdamW (``others='adamw'``) beyond its
record's sketches, which hold matrices only: a network's parameters, where the matrices
take Muon and the rest (vectors, a 3-D tensor, an embedding named by ``adamw_names``)
take AdamW with their own lr and no decay through groups, as Muon's trainings set it up;
conv kernels flattened into Muon (``muon_params='matrices_and_conv'``) with the
iteration in bfloat16; and gradients from a real backward in both clearing modes."""

from __future__ import annotations

import unified_opt as uo

from .case import BACKWARD_MODES, PARAMS, Case

#: the standard parameters, an embedding and a conv kernel (out, in, kh, kw)
NETWORK = {**PARAMS, "emb": (20, 8), "conv": (8, 3, 3, 3)}
#: the parameters Muon's trainings give AdamW: vectors and the embedding
NOT_MATRICES = ("bias", "ln.*", "scale", "empty", "emb")


def cases() -> list[Case]:
    return [
        Case(id="muon_with_adamw",
             spec=uo.Muon(lr=0.02, others="adamw", adamw_names=("emb",)),
             params=NETWORK,
             groups=(uo.Group(match=NOT_MATRICES, lr=3e-3, weight_decay=0.0),),
             description="Keller Jordan's set-up: matrices take Muon, the rest AdamW with "
                         "their own lr and no decay (groups); the 3-D tensor takes AdamW"),
        Case(id="muon_with_adamw_conv_bfloat16",
             spec=uo.Muon(lr=0.02, others="adamw", adamw_names=("emb",),
                          muon_params="matrices_and_conv", ns_dtype="bfloat16",
                          adjust_lr_fn="match_rms_adamw", adamw_betas=(0.8, 0.99),
                          adamw_eps=1e-8),
             params=NETWORK,
             groups=(uo.Group(match=NOT_MATRICES, lr_scale=0.5),),
             description="conv kernels and the 3-D tensor flattened into Muon, the "
                         "iteration in bfloat16, Moonlight's shared lr"),
    ] + [
        Case(id=f"muon_with_adamw_backward_{mode}",
             spec=uo.Muon(lr=0.02, others="adamw", ns_dtype="bfloat16"), params=NETWORK,
             groups=(uo.Group(match=NOT_MATRICES, lr=3e-3, weight_decay=0.0),),
             backward=mode,
             description=f"gradients from backward(), cleared with {mode}: both states "
                         "(momentum, AdamW's moments) kept apart from the gradients")
        for mode in BACKWARD_MODES]
