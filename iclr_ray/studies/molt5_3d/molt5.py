"""3D-MolT5's method as plain RDKit / selfies / E3FP / torch code (no Ray, no I/O).

- :func:`mol_from_xyz`: a conformer (elements and coordinates, as QM9 gives them) to an RDKit
  molecule with its bonds perceived from the geometry, hydrogens kept as coordinates only.
- :func:`featurise`: the molecule's SELFIES tokens and, aligned one to one with them, its E3FP
  identifiers: per heavy atom the shell identifier at each level 0..L (E3FP with RDKit invariants,
  every atom's shell at every iteration, not only the unique substructures), folded to [0, bits);
  -1 on every token that is not an atom (branches, rings and their index symbols).
- :class:`Fusion` / :class:`MolT5`: a T5 whose encoder input is ``c1 E_1D(token) + c3 E_3D(fp)``
  with a separate 3D table (row 0 = no identifier, zero and never updated), the 3D embedding the
  mean over the levels; (c1, c3) = (0.5, 0.5) on every token, as the official code weighs the
  whole sequence (a token without an identifier gets 0.5 E_1D); "concat" puts an MLP
  (2d -> 4d -> d) over the two instead.
- :func:`span_corrupt`: T5's span corruption (15% of the tokens, mean span 3) over a molecule's
  tokens with their 3D identifiers masked alike: the pretraining objective used here.
- Text regression: a property as a fixed-point number the decoder writes (:func:`format_value`,
  :func:`parse_value`), read back by greedy decoding.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import nn

BITS, LEVEL = 4096, 3
SPECIALS = ["<pad>", "</s>", "<unk>"]
"""T5's first three ids: padding (also the decoder's start), end of sequence, unknown"""
MOL_TOKENS = ["<bom>", "<eom>", "<atom>"]
"""the molecule's wrappers, and the 1D slot of an atom in the 3D-only view (its 1D weight is 0)"""
NUMBER_CHARS = list("0123456789.-")
SENTINELS = [f"<extra_id_{i}>" for i in range(32)]
_BRANCH_RING = re.compile(r"^\[[-=#/\\]*(Branch|Ring)(\d)\]$")
_ELEMENT = re.compile(r"^\[[-=#/\\]*([A-Z][a-z]?)")


# ----------------------------------------------------------------------------- molecules


def mol_from_xyz(elements: Sequence[str], xyz: np.ndarray, charge: int = 0):
    """The molecule a conformer describes: bonds (and bond orders) perceived from the geometry by
    RDKit's ``DetermineBonds``, hydrogens removed as atoms (their coordinates were used). Raises
    ``ValueError`` when RDKit cannot assign bonds consistent with ``charge``."""
    from rdkit import Chem, RDLogger
    from rdkit.Chem import rdDetermineBonds

    RDLogger.DisableLog("rdApp.*")
    block = f"{len(elements)}\n\n" + "\n".join(f"{e} {x:.10f} {y:.10f} {z:.10f}" for e, (x, y, z) in zip(elements, xyz))
    mol = Chem.MolFromXYZBlock(block)
    if mol is None:
        raise ValueError("RDKit could not read the coordinates")
    try:
        rdDetermineBonds.DetermineBonds(mol, charge=charge)
        mol = Chem.RemoveAllHs(mol)  # all: RemoveHs keeps an imine's H that defines a double bond's stereo
    except Exception as exc:  # RDKit raises ValueError or its own RuntimeError subclasses
        raise ValueError(f"no bond assignment: {exc}") from None
    return mol


def atom_token_mask(tokens: Sequence[str]) -> np.ndarray:
    """Which SELFIES tokens are atoms: every token but the branch / ring tokens and the index
    symbols they consume (``[Branch{n}]`` and ``[Ring{n}]`` read the next n tokens as a number)."""
    mask = np.zeros(len(tokens), bool)
    i = 0
    while i < len(tokens):
        m = _BRANCH_RING.match(tokens[i])
        if m:
            i += 1 + int(m.group(2))
            continue
        mask[i] = True
        i += 1
    return mask


def e3fp_levels(mol, bits: int = BITS, level: int = LEVEL) -> dict[int, list[int]]:
    """Per heavy atom (RDKit index), its E3FP shell identifier at each level 0..``level`` folded to
    [0, bits). A level E3FP does not reach (every shell already spans the molecule) repeats the
    atom's last identifier."""
    from e3fp.fingerprint.fprinter import Fingerprinter, signed_to_unsigned_int

    fp = Fingerprinter(bits=bits, level=level, rdkit_invariants=True, remove_duplicate_substructs=False,
                       stereo=True)
    fp.run(conf=0, mol=mol)
    out: dict[int, list[int]] = {}
    shells = None
    for lv in range(level + 1):
        try:
            shells = fp.shells_gen.get_shells_at_level(lv)
        except IndexError:
            pass  # converged: keep the previous level's shells
        for atom, shell in shells.items():
            out.setdefault(int(atom), []).append(int(signed_to_unsigned_int(shell.identifier) % bits))
    return out


def morgan_levels(mol, bits: int = BITS, level: int = LEVEL) -> dict[int, list[int]]:
    """Per heavy atom (RDKit index), its Morgan (ECFP) environment identifier at each radius
    0..``level`` folded to [0, bits): the 2D counterpart of :func:`e3fp_levels` (the same atoms,
    the same levels, topology instead of the conformer's shells). A radius RDKit leaves out (the
    environment repeats a smaller one) repeats the atom's last identifier."""
    from rdkit.Chem import rdFingerprintGenerator

    gen = rdFingerprintGenerator.GetMorganGenerator(radius=level)
    ao = rdFingerprintGenerator.AdditionalOutput()
    ao.AllocateBitInfoMap()
    gen.GetSparseCountFingerprint(mol, additionalOutput=ao)
    per: dict[int, list[int | None]] = {a.GetIdx(): [None] * (level + 1) for a in mol.GetAtoms()}
    for ident, envs in ao.GetBitInfoMap().items():
        for atom, radius in envs:
            per[int(atom)][int(radius)] = int(ident) % bits
    out: dict[int, list[int]] = {}
    for atom, ids in per.items():
        last = ids[0]
        filled = []
        for x in ids:
            last = x if x is not None else last
            filled.append(last)
        out[atom] = filled
    return out


@dataclass
class Featurised:
    smiles: str
    tokens: list[str]
    """the SELFIES tokens"""
    fp: np.ndarray
    """(len(tokens), level + 1) int: the E3FP identifiers of each atom token, -1 elsewhere"""
    fp2d: np.ndarray | None = None
    """the same shape: each atom token's Morgan (ECFP) identifiers, the 2D control's"""


def featurise(mol, bits: int = BITS, level: int = LEVEL) -> Featurised:
    """A molecule (with a conformer) as SELFIES tokens and their aligned 3D identifiers.

    The SELFIES come from RDKit's canonical SMILES, whose atom order (``_smilesAtomOutputOrder``)
    is the order of SELFIES' atom tokens; each atom token's element is checked against the RDKit
    atom it is aligned to (``ValueError`` when they differ)."""
    import selfies as sf
    from rdkit import Chem

    smiles = Chem.MolToSmiles(mol)
    order = [int(i) for i in mol.GetProp("_smilesAtomOutputOrder").strip("[],").split(",") if i]
    tokens = list(sf.split_selfies(sf.encoder(smiles)))
    mask = atom_token_mask(tokens)
    if mask.sum() != len(order):
        raise ValueError(f"{smiles}: {mask.sum()} SELFIES atom tokens for {len(order)} atoms")
    ids = e3fp_levels(mol, bits, level)
    ids2d = morgan_levels(mol, bits, level)
    fp = np.full((len(tokens), level + 1), -1, np.int64)
    fp2d = np.full((len(tokens), level + 1), -1, np.int64)
    for pos, atom in zip(np.flatnonzero(mask), order):
        element = _ELEMENT.match(tokens[pos])
        if element is None or element.group(1) != mol.GetAtomWithIdx(atom).GetSymbol():
            raise ValueError(f"{smiles}: SELFIES token {tokens[pos]} is not atom {atom} "
                             f"({mol.GetAtomWithIdx(atom).GetSymbol()})")
        if atom not in ids:  # E3FP leaves out an atom without bonds (a fragment of one atom)
            raise ValueError(f"{smiles}: atom {atom} has no E3FP shell (no bonds)")
        fp[pos] = ids[atom]
        fp2d[pos] = ids2d[atom]
    return Featurised(smiles, tokens, fp, fp2d)


def radius_of_gyration(xyz: np.ndarray, elements: Sequence[str]) -> float:
    """The heavy atoms' radius of gyration (unweighted, Angstrom): a property of the geometry."""
    heavy = np.asarray([e != "H" for e in elements])
    p = np.asarray(xyz, float)[heavy]
    return float(np.sqrt(((p - p.mean(0)) ** 2).sum(1).mean()))


# ----------------------------------------------------------------------------- text


def vocabulary(selfies_tokens: Sequence[str], tasks: Sequence[str]) -> list[str]:
    """T5's special ids first, then the molecule wrappers, the sentinels, the task prompts, the
    characters of numbers and the SELFIES alphabet (selfies' robust alphabet and any other token
    seen, sorted: the same vocabulary for any subset of a data set)."""
    import selfies as sf

    alphabet = sorted(set(sf.get_semantic_robust_alphabet()) | set(selfies_tokens))
    return SPECIALS + MOL_TOKENS + SENTINELS + [f"<{t}>" for t in tasks] + NUMBER_CHARS + alphabet


def build_tokenizer(vocab: list[str]):
    """A word-level tokenizer over ``vocab`` (SELFIES tokens and prompt tokens whole, numbers by
    character) in Hugging Face's format, so a checkpoint saves and reloads with it."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(vocab)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.Split(Regex(r"\[[^\]]*\]|<[^>]*>|\S"), behavior="isolated")])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def format_value(x: float, decimals: int) -> str:
    return f"{x:.{decimals}f}"


def parse_value(text: str) -> float:
    """The number a decoder wrote; NaN when it is not one."""
    try:
        return float(text)
    except ValueError:
        return float("nan")


# ----------------------------------------------------------------------------- span corruption


def span_corrupt(n: int, rng: np.random.Generator, noise: float = 0.15,
                 mean_span: float = 3.0) -> list[tuple[int, int]]:
    """T5's span corruption over ``n`` tokens: round(``noise`` n) of them (at least one, never all
    of a longer sequence) masked in spans of mean length ``mean_span``, the span lengths and the
    gaps between them drawn at random; the spans as sorted, disjoint (start, end), separated."""
    n_noise = max(1, min(round(n * noise), n - 1 if n > 1 else 1))
    n_spans = max(1, min(round(n_noise / mean_span), n - n_noise + 1))

    def positive(total: int, parts: int) -> np.ndarray:  # ``parts`` lengths >= 1 summing to ``total``
        cuts = np.sort(rng.choice(np.arange(1, total), parts - 1, replace=False)) if parts > 1 else []
        return np.diff(np.concatenate([[0], cuts, [total]])).astype(int)

    lengths = positive(n_noise, n_spans)
    spare = n - n_noise - (n_spans - 1)  # non-masked tokens beyond the one separating each pair of spans
    gaps = positive(spare + n_spans + 1, n_spans + 1) - 1
    gaps[1:-1] += 1
    out, pos = [], 0
    for g, ln in zip(gaps[:-1], lengths):
        pos += int(g)
        out.append((pos, pos + int(ln)))
        pos += int(ln)
    return out


def corrupted(ids: Sequence[int], fp: np.ndarray, spans: list[tuple[int, int]], sentinel_ids: Sequence[int],
              eos: int) -> tuple[list[int], np.ndarray, list[int]]:
    """The encoder input (each span replaced by its sentinel, the sentinel without 3D identifier)
    and the target (each sentinel followed by the span's tokens, then end of sequence)."""
    inp, inp_fp, target = [], [], []
    pos = 0
    for k, (a, b) in enumerate(spans):
        inp += list(ids[pos:a])
        inp_fp += list(fp[pos:a])
        inp.append(sentinel_ids[k])
        inp_fp.append(np.full(fp.shape[1], -1))
        target += [sentinel_ids[k], *ids[a:b]]
        pos = b
    inp += list(ids[pos:])
    inp_fp += list(fp[pos:])
    return inp, np.asarray(inp_fp, np.int64).reshape(-1, fp.shape[1]), target + [eos]


# ----------------------------------------------------------------------------- the model


MODES = ("1d", "3d", "sum", "concat")


class Fusion(nn.Module):
    """The encoder's input embedding of 3D-MolT5: the token table (the T5's own), a 3D table of
    ``bits + 1`` rows (an identifier id is row id + 1; row 0, no identifier, is zero and gets no
    gradient), the 3D embedding the mean over the levels.

    - ``sum``: 0.5 E_1D + 0.5 E_3D on every token (E_3D is zero where a token has no identifier), as
      the official code fuses the whole sequence;
    - ``1d``: E_1D only (the 1D-only model: the identifiers are never read);
    - ``3d``: (0, 1) on tokens with identifiers, (1, 0) elsewhere (fed the atoms-only view);
    - ``concat``: MLP([E_1D, E_3D]) (2d -> 4d -> d) on tokens with identifiers, E_1D elsewhere."""

    def __init__(self, token_embedding: nn.Embedding, mode: str, bits: int = BITS):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"fusion mode {mode!r}: one of {MODES}")
        self.token, self.mode = token_embedding, mode
        d = token_embedding.embedding_dim
        self.fp = nn.Embedding(bits + 1, d, padding_idx=0)
        self.fp.weight.data.normal_(0.0, float(token_embedding.weight.data.std()) or 1.0)
        self.fp.weight.data[0].zero_()
        self.mlp = nn.Sequential(nn.Linear(2 * d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)) if mode == "concat" else None

    def forward(self, ids: torch.Tensor, fp: torch.Tensor) -> torch.Tensor:
        e1 = self.token(ids)
        if self.mode == "1d":
            return e1
        has = (fp >= 0).any(-1, keepdim=True)
        e3 = self.fp(fp + 1).mean(-2)
        if self.mode == "concat":
            return torch.where(has, self.mlp(torch.cat([e1, e3], -1)), e1)
        if self.mode == "sum":
            return 0.5 * e1 + 0.5 * e3
        return torch.where(has, e3, e1)


def t5_config(vocab_size: int, d_model: int, d_ff: int, layers: int, heads: int, dropout: float):
    """A T5-v1.1-shaped config (gated GELU, untied head) at a given size."""
    from transformers import T5Config

    return T5Config(vocab_size=vocab_size, d_model=d_model, d_ff=d_ff, d_kv=d_model // heads, num_layers=layers,
                    num_decoder_layers=layers, num_heads=heads, dropout_rate=dropout, feed_forward_proj="gated-gelu",
                    tie_word_embeddings=False, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)


def build_t5(config):
    """A T5 with the untied output head T5 v1.1 has. transformers 5 ties ``lm_head`` to the shared
    embedding whatever the config says (its T5Config sets ``tie_word_embeddings`` to True and keeps
    only the v1.1 output scaling), so the head is given a parameter of its own, starting from the
    embedding's initial values."""
    from transformers import T5ForConditionalGeneration

    t5 = T5ForConditionalGeneration(config)
    if t5.lm_head.weight is t5.shared.weight:
        t5.lm_head.weight = nn.Parameter(t5.shared.weight.detach().clone())
    return t5


class MolT5(nn.Module):
    """A T5 encoder-decoder with :class:`Fusion` in front of its encoder."""

    def __init__(self, t5, mode: str, bits: int = BITS):
        super().__init__()
        self.t5 = t5
        self.fusion = Fusion(t5.get_input_embeddings(), mode, bits)

    def encode_inputs(self, ids: torch.Tensor, fp: torch.Tensor) -> torch.Tensor:
        return self.fusion(ids, fp)

    def forward(self, ids, fp, mask, labels) -> torch.Tensor:
        """Per-example mean token cross-entropy, summed over the batch (labels: -100 = none)."""
        out = self.t5(inputs_embeds=self.encode_inputs(ids, fp), attention_mask=mask, labels=labels)
        logits = out.logits.float()
        ce = nn.functional.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100, reduction="none")
        valid = (labels != -100).float()
        return ((ce * valid).sum(1) / valid.sum(1).clamp(min=1)).sum()

    @torch.no_grad()
    def generate(self, ids, fp, mask, max_new_tokens: int) -> torch.Tensor:
        return self.t5.generate(inputs_embeds=self.encode_inputs(ids, fp), attention_mask=mask, do_sample=False,
                                num_beams=1, max_new_tokens=max_new_tokens)


def decode(model: MolT5, ids: torch.Tensor, fp: torch.Tensor, mask: torch.Tensor, max_new_tokens: int,
           id_to_token: dict[int, str]) -> list[float]:
    """Greedy-decoded numbers for a batch, on whatever device ``model`` is on (the batch is moved
    there); NaN where the decoder wrote no number. Padding (0) and end of sequence (1) are dropped."""
    device = next(model.parameters()).device
    gen = model.generate(ids.to(device), fp.to(device), mask.to(device), max_new_tokens).cpu().numpy()
    return [parse_value("".join(id_to_token[int(t)] for t in row[1:] if int(t) > 1)) for row in gen]


VIEWS = {"1d": "full", "sum": "full", "concat": "full", "3d": "atoms", "shuffled": "shuffled", "ecfp": "ecfp"}
"""which input view each variant reads: the molecule's tokens with their identifiers, its atoms only
(3D-only), its tokens with another molecule's identifiers (the negative control, fused by sum), or
its tokens with their atoms' Morgan (ECFP) identifiers (the 2D control, fused by sum)"""


def variant_mode(variant: str) -> str:
    return "sum" if variant in ("shuffled", "ecfp") else variant


class Variants(nn.Module):
    """The variants of one seed trained side by side on one stream of molecules: the loss is the
    sum of each variant's loss on its own view of the batch, so each variant's gradient is its own
    (AdamW is per parameter; no clipping couples them)."""

    def __init__(self, models: dict[str, MolT5]):
        super().__init__()
        self.names = list(models)
        self.models = nn.ModuleList(models.values())

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        total = 0.0
        for name, m in zip(self.names, self.models):
            v = VIEWS[name]
            total = total + m(batch[f"{v}_ids"], batch[f"{v}_fp"], batch[f"{v}_mask"], batch[f"{v}_labels"])
        return total


def atoms_view(fp: np.ndarray, atom_id: int) -> tuple[list[int], np.ndarray]:
    """The 3D-only input of a molecule: its atom tokens only, each as ``<atom>`` (weight 0) with its
    identifiers; no 1D token of the molecule reaches the encoder."""
    keep = (fp >= 0).any(1)
    return [atom_id] * int(keep.sum()), fp[keep]


def shuffled_assignment(groups: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    """A permutation sending each molecule to another with the same number of atom tokens (so the
    identifiers still line up one to one with atom tokens) and, where the group has more than one
    member, never to itself: the negative control's conformer assignment."""
    groups = np.asarray(groups)
    perm = np.arange(len(groups))
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        if len(idx) > 1:
            perm[idx] = _derangement(idx, rng)
    return perm


def _derangement(idx: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    order = idx[rng.permutation(len(idx))]
    out = np.empty_like(idx)
    out[np.searchsorted(idx, order)] = np.roll(order, 1)  # a cycle through a random order: no fixed point
    return out
