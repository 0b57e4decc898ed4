"""One rule for ids at every entry point: a look-alike account id is never a second customer, and a
catalog id can never leave an output folder (``schemas.limits``)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipelines.cli import main
from pipelines.errors import UsageBillingError
from pipelines.ingest.validate import non_canonical
from pipelines.warehouse.accounts import parse_accounts
from schemas.catalog import CatalogError, load_catalog
from schemas.limits import account_id_problem, looks_alike
from tests.conftest import CATALOG_PATH
from tests.data.bad.corpus import LOOKALIKES

CANONICAL = ["acct-00003", "o'brien", "ünïcødé-账户-🚀", "x[/]y", "org_9f3a.b-c"]


def test_ingest_and_the_python_rule_agree_on_every_look_alike():
    values = [*LOOKALIKES, *CANONICAL, "ACCT-00003", "acct-0000\uff13", "acct-00003\u00a0"]
    # a dictionary column (Parquet) and a plain one (JSON) get the same verdicts as the rule
    for col in (
        pa.chunked_array([pa.array(values)]),
        pa.chunked_array([pa.array(values).dictionary_encode()]),
    ):
        assert non_canonical(col).tolist() == [looks_alike(v) for v in values]
    assert all(looks_alike(v) for v in LOOKALIKES)
    assert not any(account_id_problem(v) for v in CANONICAL)


@pytest.mark.parametrize("lookalike", LOOKALIKES)
def test_the_accounts_file_refuses_a_look_alike_instead_of_trimming_it(tmp_path, catalog, lookalike):
    path = tmp_path / "accounts.csv"
    path.write_text(
        "account_id,plan,timezone,active_from,active_until\n"
        f'acct-bad-corpus,pro,UTC,2026-02-01,\n"{lookalike}",pro,UTC,2026-02-01,\n',
        encoding="utf-8",
    )
    with pytest.raises(UsageBillingError, match="line 3: account_id"):
        parse_accounts(path, catalog)


@pytest.mark.parametrize(
    "command", [["quota", "show"], ["invoices", "export", "--month", "2026-03", "--out", "x"]]
)
def test_the_command_line_refuses_a_look_alike_account(capsys, tmp_path, command):
    code = main(["--database-url", f"sqlite:///{tmp_path / 'w.db'}", *command, "--account", "ACCT-00003"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "not in canonical form" in lines[0], err


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('id = "gpt-5.3-codex-spark"', 'id = "../../x"'),
        ('id = "gpt-5.3-codex-spark"', 'id = "GPT-5.3-codex-spark"'),
        ('id = "pro"', 'id = "pro/../../etc"'),
        ('id = "pro"', 'id = " pro"'),
    ],
)
def test_the_catalog_refuses_ids_that_are_not_safe_names(tmp_path, old, new):
    text = CATALOG_PATH.read_text()
    assert old in text
    bad = tmp_path / "catalog.toml"
    bad.write_text(text.replace(old, new))
    with pytest.raises(CatalogError, match="is not a catalog id"):
        load_catalog(bad)
