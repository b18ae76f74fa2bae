"""Weight gathering: the policy's full weights in the server's names, across any training layout.

`gather.gather_and_send_weights` is the one routine both jobs (online and env GRPO) call; the
other modules each handle one layout: `dtensor` (FSDP2 / DTensor TP / DTensor EP), `shards`
(hand-sliced TP and EP shards declared on their module), `experts` (fused 3D expert tensors to the
checkpoint's per-expert names), `lora` (PEFT adapters folded out of place), `layout` (what is
supported and what is refused), `agreement` (every rank raises when one rank fails).
"""
