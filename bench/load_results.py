"""Reading saturn-load's --json output in the bench scripts (prefix_caching.sh, speculation.sh)."""
import json


def first_phase(path):
    """The first phase of a saturn-load --json file."""
    return json.load(open(path))["phases"][0]


def server_profile(phase):
    """The server's profile over a phase, from the last report saturn-load fetched ({} if none)."""
    reports = phase.get("diagnosis") or []
    return reports[-1].get("profile", {}) if reports else {}


def followed(path, **keys):
    """Per followed plan action of a --follow_plan run: the prediction beside the measurement,
    or the note of a phase that followed nothing; each row also holds `keys`."""
    rows = []
    for p in json.load(open(path))["phases"]:
        f = p.get("followed_plan")
        if f:
            rows.append(dict(keys, action=f["action"], metric=f["metric"],
                             predicted=f["predicted"], measured=f["measured"], error=f["error"],
                             expected_error=f["expected_error"]))
        elif p.get("follow_note"):
            rows.append(dict(keys, note=p["follow_note"]))
    return rows
