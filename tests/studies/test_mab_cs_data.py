"""mab_cs's instance builders on small files written here: MovieLens ratings/movies CSVs, a
Goodreads ratings CSV and a folder of Goodreads JSON-lines review files, and their errors."""
import json

import numpy as np
import pytest

from iclr_ray.config import DataError
from iclr_ray.studies.mab_cs import data


def write(path, text):
    path.write_text(text)
    return path


@pytest.fixture
def movielens_files(tmp_path):
    movies = write(tmp_path / "movies.csv", "movieId,title,genres\n1,A (1999),Comedy|Drama\n2,B (2001),Drama\n"
                                            "3,C (2005),Horror\n4,D (2010),(no genres listed)\n")
    ratings = write(tmp_path / "ratings.csv", "userId,movieId,rating,timestamp\n1,1,4.0,0\n2,1,5.0,0\n1,2,3.0,0\n"
                                              "3,3,1.5,0\n4,4,2.5,0\n5,99,5.0,0\n")
    return ratings, movies


def test_movielens_arm_means_are_genre_average_ratings_over_five(movielens_files):
    inst = data.movielens(*movielens_files, cost_seed=0)
    expected = {"(no genres listed)": 2.5 / 5, "Comedy": 4.5 / 5, "Drama": 4.0 / 5, "Horror": 1.5 / 5}
    assert sorted(inst.labels) == sorted(expected)
    for label, mu in zip(inst.labels, inst.mu):
        assert mu == pytest.approx(round(expected[label], 3))
    # the paper's cost draw: numpy's legacy generator with the seed, one uniform per genre in
    # alphabetical order, 3 decimals; then arms sorted by cost
    costs = dict(zip(sorted(expected), np.round(np.random.RandomState(0).rand(4), 3)))
    assert list(inst.cost) == sorted(costs.values())
    assert [costs[g] for g in inst.labels] == list(inst.cost)


def test_goodreads_share_of_ratings_above_three_from_csv_or_json_lines(tmp_path):
    csv_file = write(tmp_path / "gr.csv", "genre,rating\nfantasy,5\nfantasy,3\nfantasy,4\nhistory,2\nhistory,4\n")
    inst = data.goodreads(csv_file, cost_seed=1)
    assert dict(zip(inst.labels, inst.mu)) == {"fantasy": pytest.approx(0.667), "history": 0.5}
    folder = tmp_path / "reviews"
    folder.mkdir()
    write(folder / "fantasy.json", "\n".join(json.dumps({"rating": r, "book_id": "x"}) for r in (5, 3, 4)) + "\n")
    write(folder / "history.json", json.dumps({"rating": 2}) + "\n\n" + json.dumps({"rating": 4}) + "\n")
    assert data.goodreads(folder, cost_seed=1) == inst


@pytest.mark.parametrize("movies,ratings,message", [
    ("movieId,title\n1,A\n", "userId,movieId,rating\n1,1,4\n", "no column genres"),
    ("movieId,title,genres\n1,A,Drama\n", "", "empty file"),
    ("movieId,title,genres\n1,A,Drama\n", "userId,movieId,rating\n1,1,4\n1,1,good\n", r"ratings.csv:3: rating 'good'"),
    ("movieId,title,genres\n1,A,Drama\n", "userId,movieId,rating\n1,1,7\n", "above the 5-star scale"),
    ("movieId,title,genres\n1,A,Drama\n", "userId,movieId,rating\n1,1,4\n", "1 genre"),
])
def test_movielens_errors_name_the_file_and_line(tmp_path, movies, ratings, message):
    with pytest.raises(DataError, match=message):
        data.movielens(write(tmp_path / "ratings.csv", ratings), write(tmp_path / "movies.csv", movies))


def test_goodreads_errors(tmp_path):
    with pytest.raises(DataError, match="no column genre"):
        data.goodreads(write(tmp_path / "a.csv", "book,rating\nx,4\n"))
    with pytest.raises(DataError, match=r"b.csv:2: empty genre"):
        data.goodreads(write(tmp_path / "b.csv", "genre,rating\n,4\n"))
    folder = tmp_path / "reviews"
    folder.mkdir()
    with pytest.raises(DataError, match="no .json/.jsonl review files"):
        data.goodreads(folder)
    write(folder / "a.json", '{"rating": 4}\nnot json\n')
    with pytest.raises(DataError, match=r"a.json:2: not JSON"):
        data.goodreads(folder)
    with pytest.raises(DataError, match="cannot read"):
        data.goodreads(tmp_path / "missing.csv")


def test_builtin_instances_are_the_papers():
    ml, gr = data.BUILTIN["movielens_paper"], data.BUILTIN["goodreads_paper"]
    assert ml.K == 20 and gr.K == 8 and list(ml.cost) == sorted(ml.cost)
    # the published targets: alpha 0.05 makes arm 13 (MovieLens) and arm 0 (Goodreads) the target
    assert ml.target("subsidy", 0.05) == 13 and gr.target("subsidy", 0.05) == 0
    assert [data.toy(x).target("subsidy", 0.2) for x in (0.75, 0.78)] == [1, 0]
    two = data.two_arm(0.08)
    assert two.mu == pytest.approx((0.62, 0.7)) and two.target("known_ref", 0.0, ell=1) == 1
