"""molt5_3d's QM9 reader: the packaged files, a small file the test writes, bad rows named by
file:line, the split."""
import numpy as np
import pytest

from iclr_ray.config import ConfigError, DataError
from iclr_ray.studies.molt5_3d import data as D

HEADER = ("XYZ_file,Index,SMILES,InChi,N_atoms,Stoichiometry,Elements,XYZ_Ang,Mulliken_pop,Harmonic_Freq_cmi,RotA_GHz,"
          "RotB_GHz,RotC_GHz,Dipole_debye,Polarizability_bohr3,HOMO_au,LUMO_au,HOMO_LUMO_gap_au,R2_bohr2,ZPVE_au,"
          "InternalEnergy_0K_au,InternalEnergy_298K_au,Enthalphy_298K_au,GibbsFreeEnergy_298K_au,Heatcapacity_Cv_cal_mol_K")
WATER = ('"dsgdb9nsd_000003.xyz",3,"O","InChI=1S/H2O/h1H2",3,"[2,0,0,1,0]","[\'O\',\'H\',\'H\']",'
         '"[[-0.0343604951,0.9775395708,0.0076015923],[0.0647664923,0.0205721989,0.0015346341],'
         '[0.8717903737,1.300792105,0.000693627]]","[-0.6,0.3,0.3]","[1.0]",1.,2.,3.,1.9,6.3,-0.2928,0.0687,0.3615,'
         '19.0,0.02,-76.4,-76.4,-76.4,-76.4,6.0')
HCN = ('"dsgdb9nsd_000004.xyz",4,"C#N","x",3,"[1,1,1,0,0]","[\'C\',\'N\',\'H\']",'
       '"[[-0.0133239314,1.1324657151,0.0082758861],[0.0023107217,-0.0191585871,0.0019287305],'
       '[-0.0278026991,2.1989492963,0.0141537903]]","[0,0,0]","[1.0]",0.,44.,44.,2.8,12.5,-0.3604,0.0191,0.3796,'
       '59.5,0.01,-93.4,-93.4,-93.4,-93.4,6.3')


def _write(tmp_path, *rows, name="qm9.csv"):
    path = tmp_path / name
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    return path


def test_a_small_file_reads_with_targets_in_ev(tmp_path):
    path = _write(tmp_path, WATER, HCN)
    mols = D.read_qm9(str(path))
    assert [m.index for m in mols] == [3, 4] and mols[0].elements == ["O", "H", "H"]
    assert mols[0].xyz.shape == (3, 3) and mols[0].xyz[2, 1] == pytest.approx(1.300792105)
    assert mols[0].props["homo"] == pytest.approx(-0.2928 * D.HARTREE_EV)
    assert mols[1].props["gap"] == pytest.approx(0.3796 * D.HARTREE_EV) and mols[1].props["atoms"] == 3
    assert [m.index for m in D.read_qm9(str(tmp_path))] == [3, 4]  # a folder of CSV files
    assert len(D.read_qm9(str(path), limit=1)) == 1


@pytest.mark.parametrize("row, what", [
    (WATER.replace(",3,\"[2,0,0,1,0]\"", ",4,\"[2,0,0,1,0]\""), "N_atoms 4 but 3 elements"),
    (WATER.replace("[0.8717903737,1.300792105,0.000693627]", "[0.87,1.3]"), "8 coordinates for 3 atoms"),
    (WATER.replace("\\'O\\'", "\\'Xe\\'").replace("'O'", "'Xe'"), "unknown element"),
    (WATER.replace("-0.2928", "n/a"), "could not convert"),
])
def test_bad_rows_name_file_and_line(tmp_path, row, what):
    path = _write(tmp_path, HCN, row)
    with pytest.raises(DataError, match=rf"qm9.csv:3: .*{what}"):
        D.read_qm9(str(path))


def test_missing_columns_and_paths_are_one_line_errors(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("Index,SMILES\n1,C\n")
    with pytest.raises(DataError, match="x.csv:1: missing column"):
        D.read_qm9(str(path))
    with pytest.raises(ConfigError, match="does not exist"):
        D.read_qm9(str(tmp_path / "nope.csv"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no .csv file"):
        D.read_qm9(str(tmp_path / "empty"))


def test_packaged_qm9_has_all_molecules_with_3d_coordinates():
    try:
        files = D.packaged_files()
    except ConfigError as exc:
        pytest.skip(str(exc))
    assert [f.name for f in files] == list(D.FILES)
    mols = D.read_qm9("packaged", limit=2000)
    assert len(mols) == 2000 and mols[0].smiles == "C" and mols[0].elements == ["C", "H", "H", "H", "H"]
    assert all(m.xyz.shape == (len(m.elements), 3) for m in mols)
    gaps = np.array([m.props["gap"] for m in mols])
    assert 1 < gaps.min() and gaps.max() < 25  # eV


def test_split_is_seeded_and_disjoint():
    tr, va, te = D.split_indices(100, 10, 20, seed=3)
    assert len(tr) == 70 and len(va) == 10 and len(te) == 20
    assert len(set(tr) | set(va) | set(te)) == 100
    assert (D.split_indices(100, 10, 20, seed=3)[2] == te).all()
    with pytest.raises(ConfigError):
        D.split_indices(10, 5, 5, 0)
