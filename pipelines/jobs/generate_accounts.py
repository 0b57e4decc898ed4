"""The generated scenario's accounts: their ids and the accounts file's rows (plan periods)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa


def account_ids(n_acc: int) -> pa.Array:
    width = max(5, len(str(n_acc)))
    return pa.array([f"acct-{i:0{width}d}" for i in range(1, n_acc + 1)])  # one per account, not event


def account_rows(
    cfg, account_ids, plan_names, plan_idx, tz_names, tz_idx, joined, leaves, upgrade_day, day_list
):
    rows: list[dict[str, str]] = []
    ids = account_ids.to_pylist()
    for i, account in enumerate(ids):  # one row per account: thousands, not events
        plan = plan_names[plan_idx[i]] or ""
        tz = tz_names[tz_idx[i]]
        start = day_list[joined[i]].isoformat()
        until = day_list[leaves[i] - 1].isoformat() if leaves[i] < cfg.days else ""
        if upgrade_day[i] > 0 and (leaves[i] >= cfg.days or upgrade_day[i] < leaves[i]):
            switch = day_list[upgrade_day[i]]
            rows.append(
                {
                    "account_id": account,
                    "plan": plan,
                    "timezone": tz,
                    "active_from": start,
                    "active_until": (switch - dt.timedelta(days=1)).isoformat(),
                }
            )
            rows.append(
                {
                    "account_id": account,
                    "plan": "pro",
                    "timezone": tz,
                    "active_from": switch.isoformat(),
                    "active_until": until,
                }
            )
        else:
            rows.append(
                {
                    "account_id": account,
                    "plan": plan,
                    "timezone": tz,
                    "active_from": start,
                    "active_until": until,
                }
            )
    return rows
