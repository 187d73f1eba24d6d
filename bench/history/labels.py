"""Machine names the reports' own columns cannot give.

Schema-5 reports tell machines apart by machine_id and cpu_model, but VMs
cloned from one image share /etc/machine-id, and a VM's CPU model often reads
only "AMD EPYC": the Zen 4 and Zen 5 VMs of the committed reports are the same
machine by their columns. A labels file (CSV: folder, label, evidence) names
the machine of every report under a folder; the longest matching folder wins.
A report no folder matches is named by its CPU model and GPUs.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from env.paths import REPO_ROOT, reports_dir

DEFAULT_LABELS = reports_dir() / "history" / "machine_labels.csv"


@dataclass(frozen=True)
class Labels:
    by_folder: dict[Path, str]

    @classmethod
    def read(cls, path: Path | None) -> Labels:
        """The labels file's folders resolved against the repository root; none when there is no file."""
        if path is None or not path.is_file():
            return cls({})
        with open(path, newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        if rows and not {"folder", "label"} <= set(rows[0]):
            raise ValueError(f"{path}: a labels file needs the columns folder and label")
        return cls({(REPO_ROOT / r["folder"]).resolve(): r["label"].strip() for r in rows if r["folder"].strip()})

    def label_of(self, report: Path) -> str | None:
        report = report.resolve()
        matches = [f for f in self.by_folder if report.is_relative_to(f)]
        return self.by_folder[max(matches, key=lambda f: len(f.parts))] if matches else None


def fallback_label(cpu_model: str, gpus: list[str]) -> str:
    return " + ".join([cpu_model or "unknown CPU", *gpus])
