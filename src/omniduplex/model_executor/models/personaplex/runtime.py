"""The torch side of PersonaPlex: building Mimi + the LM, and one batched lockstep step.

Everything that touches ``torch`` or ``moshi`` lives here, so the plugin (engine process)
never imports them. ``SlotLMGen`` is ``moshi``'s ``LMGen`` with the step rewritten for a
slot table where every slot is an independent conversation:

* per-slot sampling: each slot has its own ``torch.Generator`` and its own temperature and
  top-k; noise is drawn per slot (Gumbel-max over the top-k logits, the same distribution
  as softmax + top-k multinomial), so a slot's tokens never depend on its neighbours;
* forcing: a slot's text token and agent audio codes can be forced (PersonaPlex prompts:
  voice prompt codes, persona text tokens, silence), which upstream ``LMGen`` cannot do;
* the user stream is always the last 8 codebooks, so PersonaPlex's 16-codebook depformer
  (``dep_q=16``) and Moshi's 8 share one step; only the agent's 8 codebooks are sampled.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from moshi.models import LMGen, LMModel, MimiModel, loaders

from .options import PersonaPlexOptions

N_AUDIO = 8  # Mimi codebooks per stream (agent and user)
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class TextCodec:
    """Text tokens <-> transcript pieces for the model's inner monologue."""

    def __init__(self, sp: Any | None, text_card: int, specials: frozenset[int]) -> None:
        self._sp = sp
        self.text_card = text_card
        self.specials = specials

    def piece(self, token: int) -> str:
        if token in self.specials or token < 0 or token >= self.text_card:
            return ""
        if self._sp is None:
            return f"w{token} "  # tiny random model: a synthetic word per token
        return str(self._sp.id_to_piece(token)).replace("\u2581", " ")

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        if self._sp is None:
            # Tiny model: map characters onto non-special ids, deterministic.
            usable = [t for t in range(self.text_card) if t not in self.specials]
            return [usable[ord(c) % len(usable)] for c in text]
        return [int(t) for t in self._sp.encode(text)]


@dataclass(slots=True)
class Models:
    mimi: MimiModel
    lm: LMModel
    text: TextCodec
    device: torch.device


def build_models(options: PersonaPlexOptions) -> Models:
    if options.torch_threads:
        torch.set_num_threads(options.torch_threads)
    device = torch.device(options.device)
    if options.model == "tiny":
        mimi, lm = _build_tiny(options, device)
        sp = None
    else:
        mimi, lm, sp = _build_pretrained(options, device)
    mimi.eval()
    lm.eval()
    specials = frozenset({lm.existing_text_padding_id, lm.existing_text_end_padding_id})
    return Models(mimi=mimi, lm=lm, text=TextCodec(sp, lm.text_card, specials), device=device)


def tiny_configs(options: PersonaPlexOptions) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Mimi and LM configs of the tiny random model (models.md section 2.5)."""
    mimi_cfg = copy.deepcopy(loaders._mimi_config)
    mimi_cfg["seanet"].update(dimension=32, n_filters=4)
    mimi_cfg["transformer"].update(
        d_model=32,
        num_heads=2,
        num_layers=1,
        dim_feedforward=64,
        input_dimension=32,
        output_dimensions=[32],
        context=16,
    )
    mimi_cfg["quantizer"].update(
        dimension=16, n_q=N_AUDIO, bins=options.tiny_card, input_dimension=32, output_dimension=32
    )
    lm_cfg = dict(loaders._lm_kwargs)
    lm_cfg.update(
        dim=32,
        text_card=options.tiny_text_card,
        card=options.tiny_card,
        num_heads=2,
        num_layers=2,
        hidden_scale=2,
        context=50,
        depformer_dim=16,
        depformer_dim_feedforward=32,
        depformer_num_heads=1,
        depformer_num_layers=1,
    )
    return mimi_cfg, lm_cfg


def _build_tiny(options: PersonaPlexOptions, device: torch.device) -> tuple[MimiModel, LMModel]:
    mimi_cfg, lm_cfg = tiny_configs(options)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(options.seed)
        mimi = loaders.get_mimi(None, mimi_cfg, device=device, num_codebooks=N_AUDIO)
        lm = loaders.get_moshi_lm(None, lm_kwargs=lm_cfg, device=device, dtype=torch.float32)
    return mimi, lm


def _build_pretrained(
    options: PersonaPlexOptions, device: torch.device
) -> tuple[MimiModel, LMModel, Any]:
    """Real weights (GPU). PersonaPlex ships no moshi ``config.json``: the LM is Moshi 7B
    with a 16-step depformer whose steps 8-15 are copied from 0-7 when absent (as the
    NVIDIA fork does). Unverified here (no GPU, gated weights)."""
    import sentencepiece
    from safetensors.torch import load_file

    def fetch(name: str) -> Path:
        if options.model_dir:
            return Path(options.model_dir) / name
        return loaders.hf_get(name, options.hf_repo)

    dtype = _DTYPES[options.dtype]
    mimi = loaders.get_mimi(fetch(options.mimi_weights), device=device, num_codebooks=N_AUDIO)
    lm_cfg = dict(loaders._lm_kwargs)
    lm_cfg["dep_q"] = 16
    lm = LMModel(device=torch.device("meta"), dtype=dtype, **lm_cfg)
    state = load_file(str(fetch(options.moshi_weights)), device=str(device))
    state = {k: (v.to(dtype) if v.dtype.is_floating_point else v) for k, v in state.items()}
    _copy_missing_depformer_steps(state, lm)
    lm.load_state_dict(state, assign=True, strict=True)
    sp = sentencepiece.SentencePieceProcessor(str(fetch(options.tokenizer)))  # type: ignore[call-arg]
    return mimi, lm, sp


def _copy_missing_depformer_steps(state: dict[str, torch.Tensor], lm: LMModel) -> None:
    expected = lm.state_dict().keys()
    for key in expected:
        if key in state:
            continue
        parts = key.split(".")
        for i, part in enumerate(parts):
            if part.isdigit() and int(part) >= N_AUDIO:
                alias = ".".join([*parts[:i], str(int(part) - N_AUDIO), *parts[i + 1 :]])
                if alias in state:
                    state[key] = state[alias].clone()
                    break


# ---- sampling ----------------------------------------------------------------------------


@dataclass(slots=True)
class SlotSampling:
    """Per-slot sampling settings, as tensors over the slot table."""

    temp: torch.Tensor  # [B] float, audio
    temp_text: torch.Tensor  # [B] float
    top_k: torch.Tensor  # [B] long, audio
    top_k_text: torch.Tensor  # [B] long


def sample_rows(
    logits: torch.Tensor, temp: torch.Tensor, top_k: torch.Tensor, noise: torch.Tensor
) -> torch.Tensor:
    """One token per row of ``logits`` [B, card]: Gumbel-max over each row's top-k.

    ``noise`` [B, >=k] holds per-row uniforms in (0, 1) drawn from each slot's own
    generator. Rows with ``temp <= 0`` are greedy.
    """
    logits = logits.float()
    card = logits.shape[-1]
    k = int(min(card, int(top_k.max().item()), noise.shape[-1]))
    values, indices = logits.topk(k, dim=-1)
    safe_temp = torch.where(temp > 0, temp, torch.ones_like(temp))[:, None]
    gumbel = -torch.log(-torch.log(noise[:, :k]))
    greedy = (temp <= 0)[:, None]
    scores = torch.where(greedy, values, values / safe_temp + gumbel)
    ranks = torch.arange(k, device=logits.device)[None, :]
    scores = scores.masked_fill(ranks >= top_k[:, None], float("-inf"))
    choice = scores.argmax(dim=-1, keepdim=True)
    return indices.gather(-1, choice)[:, 0]


class SlotLMGen(LMGen):
    """``LMGen`` whose step serves a slot table of independent conversations."""

    def __init__(self, lm_model: LMModel) -> None:
        super().__init__(lm_model, use_sampling=True, support_out_of_sync=True)
        self.n_agent = N_AUDIO
        self.user_start = 1 + lm_model.dep_q if lm_model.dep_q == N_AUDIO else 1 + N_AUDIO
        self.gen_delays = self.delays_cuda[: 1 + self.n_agent]

    @torch.no_grad()
    def step_slots(
        self,
        user_tokens: torch.Tensor,
        sampling: SlotSampling,
        noise: torch.Tensor,
        forced_text: torch.Tensor,
        forced_audio: torch.Tensor,
    ) -> torch.Tensor:
        """Advance every executing slot by one frame.

        ``user_tokens`` [B, 8]: the user's codes for this frame; ``noise`` [B, 1+8, K];
        ``forced_text`` [B] and ``forced_audio`` [B, 8]: a token >= 0 replaces the sampled
        one. Returns [B, 1+8]: the text token and agent codes of the frame generated
        ``max_delay`` steps ago, ``ungenerated_token_id`` where there is none yet.
        """
        state = self._streaming_state
        if state is None:
            raise RuntimeError("SlotLMGen.step_slots needs streaming mode")
        lm = self.lm_model
        cache = state.cache
        ct = cache.shape[2]
        exec_mask = state.exec_mask
        # The user's codes enter the cache at their (delayed) positions.
        user_rows = slice(self.user_start, self.user_start + N_AUDIO)
        user_delays = self.delays_cuda[user_rows]
        write = (state.offsets[:, None] + user_delays[None, :]) % ct
        current = cache[:, user_rows].gather(-1, write[..., None])[..., 0]
        merged = torch.where(exec_mask[:, None], user_tokens, current)
        cache[:, user_rows].scatter_(-1, write[..., None], merged[..., None])

        is_init = state.offsets[:, None, None] <= self.delays_cuda[None, :, None]
        is_init |= ~exec_mask[:, None, None]
        positions = (state.offsets % ct)[:, None, None].expand_as(is_init)
        input_ = cache.gather(dim=2, index=positions)
        input_ = torch.where(is_init, state.initial, input_)

        transformer_out, text_logits = lm.forward_text(input_)
        text = sample_rows(
            text_logits[:, 0, 0], sampling.temp_text, sampling.top_k_text, noise[:, 0]
        )
        text = torch.where(forced_text >= 0, forced_text, text)

        audio = self._depformer(text, transformer_out, sampling, noise, forced_audio)

        state.offsets = torch.where(exec_mask, state.offsets + 1, state.offsets)
        state.offset_cpu += 1
        pos = state.offsets % ct
        generated = torch.cat([text[:, None], audio], dim=1)  # [B, 1+8]
        rows = slice(0, 1 + self.n_agent)
        old = cache[:, rows].gather(-1, pos[:, None, None].expand(-1, 1 + self.n_agent, 1))
        new = torch.where(exec_mask[:, None, None], generated[..., None], old)
        cache[:, rows].scatter_(-1, pos[:, None, None].expand(-1, 1 + self.n_agent, 1), new)

        index = (state.offsets[:, None] - self.max_delay + self.gen_delays[None, :]) % ct
        out = cache[:, rows].gather(-1, index[..., None])[..., 0]
        not_ready = (state.offsets <= self.max_delay) | ~exec_mask
        out[not_ready] = lm.ungenerated_token_id
        return out

    def _depformer(
        self,
        text: torch.Tensor,
        transformer_out: torch.Tensor,
        sampling: SlotSampling,
        noise: torch.Tensor,
        forced_audio: torch.Tensor,
    ) -> torch.Tensor:
        lm = self.lm_model
        assert lm.depformer is not None
        batch = text.shape[0]
        prev = text
        tokens: list[torch.Tensor] = []
        with lm.depformer.streaming(batch):
            for cb in range(self.n_agent):
                logits = lm.forward_depformer(cb, prev[:, None, None], transformer_out)
                token = sample_rows(
                    logits[:, 0, 0], sampling.temp, sampling.top_k, noise[:, 1 + cb]
                )
                token = torch.where(forced_audio[:, cb] >= 0, forced_audio[:, cb], token)
                tokens.append(token)
                prev = token
        return torch.stack(tokens, dim=1)
