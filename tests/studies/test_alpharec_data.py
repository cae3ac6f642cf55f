"""alpharec's data: the packaged MovieLens-100k, GroupLens' and RecBole's files and the official
AlphaRec layout written here (a malformed line names its file and line), the temporal split, the
zero-shot domain and the users' mean language embeddings."""
import numpy as np
import pytest

from iclr_ray.config import ConfigError, DataError
from iclr_ray.studies.alpharec import data as D


def _packaged_or_skip():
    try:
        return D.read_packaged()
    except ConfigError as exc:
        pytest.skip(str(exc))


def test_packaged_movielens_100k_has_its_ratings_titles_and_genres():
    r = _packaged_or_skip()
    assert len(r.user) == 100_000 and len(np.unique(r.user)) == 943 and len(r.titles) == 1682
    assert r.titles[1] == "Toy Story (1995)" and set(r.genres[1]) == {"Animation", "Children's", "Comedy"}
    assert set(np.unique(r.rating)) == {1, 2, 3, 4, 5}


def test_temporal_split_keeps_each_users_newest_for_valid_and_test():
    r = _packaged_or_skip()
    s = D.temporal_split(r, 4.0, 5, (0.1, 0.1))
    assert s.n_items == 1682 and 900 < s.n_users <= 943 and len(s.user_ids) == s.n_users
    time = {(int(u), int(i)): int(t) for u, i, t in zip(r.user, r.item, r.time)}
    index = {m: k for k, m in enumerate(s.item_ids)}
    back = {k: m for m, k in index.items()}
    for user in range(0, s.n_users, 97):
        uid = s.user_ids[user]
        times = [[time[(uid, back[int(i)])] for u, i in zip(*part) if u == user] for part in (s.train, s.valid, s.test)]
        assert all(times) and max(times[0]) <= min(times[1]) and max(times[1]) <= min(times[2])
        n = sum(map(len, times))
        assert len(times[2]) == max(1, round(0.1 * n))
    n_pos = int((r.rating >= 4).sum())
    assert sum(s.stats()[k] for k in ("train", "valid", "test")) <= n_pos
    assert D.temporal_split(r, 4.0, 5, (0.1, 0.1), max_users=50).n_users == 50


def _write_100k(folder, data_lines, item_lines):
    folder.mkdir(exist_ok=True)
    (folder / "u.data").write_text("".join(f"{x}\n" for x in data_lines))
    (folder / "u.item").write_text("".join(f"{x}\n" for x in item_lines), encoding="latin-1")
    return folder


FLAGS = "|".join(["0"] * 19)


def test_grouplens_100k_files_and_the_split_on_them(tmp_path):
    items = [f"{m}|Film {m} (1990)|01-Jan-1990||http://x|" + "|".join("1" if g == m % 19 else "0" for g in range(19))
             for m in range(1, 9)]
    data = [f"{u}\t{i}\t{5 if (u + i) % 3 else 2}\t{1000 + 10 * i + u}" for u in (1, 2, 3) for i in range(1, 9)]
    folder = _write_100k(tmp_path / "ml", data, items)
    r = D.read_ratings(str(folder))
    assert len(r.user) == 24 and r.titles[3] == "Film 3 (1990)" and r.genres[3] == (D.GENRES[3],)
    s = D.temporal_split(r, 4.0, 3, (0.2, 0.2))
    assert s.n_items == 8 and s.n_users == 3
    # zero-shot domain: the items of a genre; the user means average the user's training items
    held = D.zero_shot_items(s, [D.GENRES[3]])
    assert [s.item_ids[k] for k in held] == [3]
    emb = np.arange(16, dtype=np.float32).reshape(8, 2)
    means = D.user_means(s.n_users, *s.train, emb)
    for u in range(s.n_users):
        np.testing.assert_allclose(means[u], emb[s.train[1][s.train[0] == u]].mean(0))


@pytest.mark.parametrize("data, items, where", [
    (["1\t2\t5\t100", "1\tx\t5\t101"], [f"2|A (1990)|d||u|{FLAGS}"], "u.data:2: item id 'x' is not an integer"),
    (["1\t2\t5"], [f"2|A (1990)|d||u|{FLAGS}"], "u.data:1: expected at least 4 fields"),
    (["1\t2\t5\t100"], ["2|A (1990)|d"], "u.item:1: expected 24"),
])
def test_malformed_grouplens_lines_name_file_and_line(tmp_path, data, items, where):
    folder = _write_100k(tmp_path / "bad", data, items)
    with pytest.raises(DataError, match=where.replace("(", r"\(").replace(")", r"\)")):
        D.read_ratings(str(folder))


def test_grouplens_1m_and_recbole_layouts(tmp_path):
    one_m = tmp_path / "ml1m"
    one_m.mkdir()
    (one_m / "ratings.dat").write_text("1::10::5::978300760\n1::11::4::978300761\n")
    (one_m / "movies.dat").write_text("10::Heat (1995)::Action|Crime\n11::Sabrina (1995)::Comedy\n")
    r = D.read_ratings(str(one_m))
    assert r.titles[10] == "Heat (1995)" and r.genres[10] == ("Action", "Crime") and list(r.rating) == [5, 4]
    rb = tmp_path / "recbole"
    rb.mkdir()
    (rb / "ml.inter").write_text("user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
                                 "1\t10\t5\t881250949\n2\t10\t3\t881250950\n")
    (rb / "ml.item").write_text("item_id:token\tmovie_title:token_seq\trelease_year:token\tgenre:token_seq\n"
                                "10\tHeat\t1995\tAction Crime\n")
    r = D.read_ratings(str(rb))
    assert r.titles[10] == "Heat" and r.genres[10] == ("Action", "Crime") and list(r.user) == [1, 2]
    (rb / "ml.inter").write_text("user:token\titem_id:token\trating:float\ttimestamp:float\n1\t10\t5\t1\n")
    with pytest.raises(DataError, match=r"ml.inter:1: the header lacks user_id"):
        D.read_ratings(str(rb))
    with pytest.raises(ConfigError, match="holds none of"):
        D.read_ratings(str(tmp_path))
    with pytest.raises(ConfigError, match="is not a folder"):
        D.read_ratings(str(tmp_path / "missing"))


def test_official_alpharec_layout_titles_and_embeddings(tmp_path):
    for name, lines in (("train.txt", ["0 0 1 2", "1 2 3"]), ("valid.txt", ["0 3", "1 0"]), ("test.txt", ["0 4", "1 1"])):
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    (tmp_path / "titles.tsv").write_text("0\tHeat\n4\tSabrina\n")
    s = D.read_alpharec_split(str(tmp_path), str(tmp_path / "titles.tsv"))
    assert (s.n_users, s.n_items) == (2, 5) and s.titles[0] == "Heat" and s.titles[4] == "Sabrina"
    assert list(zip(*s.train)) == [(0, 0), (0, 1), (0, 2), (1, 2), (1, 3)]
    np.save(tmp_path / "emb.npy", np.ones((5, 3)))
    assert D.read_embeddings(str(tmp_path / "emb.npy"), 5).shape == (5, 3)
    with pytest.raises(DataError, match=r"expected \(6, d\) item embeddings, found \(5, 3\)"):
        D.read_embeddings(str(tmp_path / "emb.npy"), 6)
    (tmp_path / "titles.tsv").write_text("0\tHeat\n9\tFar\n")
    with pytest.raises(DataError, match=r"titles.tsv:2: item id 9 outside 0..4"):
        D.read_alpharec_split(str(tmp_path), str(tmp_path / "titles.tsv"))
    (tmp_path / "valid.txt").write_text("0 3\n1 x\n")
    with pytest.raises(DataError, match=r"valid.txt:2: id 'x' is not an integer"):
        D.read_alpharec_split(str(tmp_path))
