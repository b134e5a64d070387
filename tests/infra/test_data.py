"""The data layer: verl's RL parquet files, with the schema and rows verl reads."""

import json

import pytest

CHECK = r"""
import json, sys
import pyarrow.parquet as pq
out = {}
for split in ("train", "test"):
    table = pq.read_table(sys.argv[1] + "/" + split + ".parquet")
    rows = table.to_pylist()
    out[split] = {
        "rows": len(rows),
        "columns": sorted(table.column_names),
        "sources": sorted({r["data_source"] for r in rows}),
        "roles": sorted({m["role"] for r in rows for m in r["prompt"]}),
        "truths_numeric": all(r["reward_model"]["ground_truth"].replace("-", "", 1).replace(".", "", 1).isdigit()
                              for r in rows),
        "styles": sorted({r["reward_model"]["style"] for r in rows}),
    }
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def parquet(training_user, stack):
    out = training_user.check_output(
        stack["stack_env_prefix"] + "/bin/python -c %s %s", CHECK, stack["data_output_dir"]
    )
    return json.loads(out)


def test_schema(parquet):
    for split in ("train", "test"):
        assert parquet[split]["columns"] == ["ability", "data_source", "extra_info", "prompt", "reward_model"]
        assert parquet[split]["sources"] == ["openai/gsm8k"]
        assert parquet[split]["styles"] == ["rule"]
        assert "user" in parquet[split]["roles"]
        assert parquet[split]["truths_numeric"]


def test_row_counts(parquet, stack):
    for split, key in (("train", "data_expect_train_rows"), ("test", "data_expect_test_rows")):
        if stack[key]:
            assert parquet[split]["rows"] == stack[key]
        assert parquet[split]["rows"] > 0


def test_owned_by_the_training_user(host, stack):
    assert host.file(stack["data_output_dir"] + "/train.parquet").user == stack["stack_user"]
