"""gpujob data check: every problem found with its line number."""

from __future__ import annotations

import json
from pathlib import Path

from gpujob.ui.report import format_report
from gpujob.usecases.datacheck import check_jsonl


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_problems_with_line_numbers(tmp_path: Path) -> None:
    f = write(tmp_path / "d.jsonl", [
        json.dumps({"text": "a good film", "label": "pos"}),        # 1
        '{"text": "broken", "label": ',                               # 2 bad json
        "",                                                          # 3 blank
        json.dumps({"body": "no text field", "label": "neg"}),       # 4 missing text
        json.dumps({"text": "   ", "label": "neg"}),                 # 5 empty
        json.dumps({"text": "a good film", "label": "pos"}),         # 6 duplicate of 1
        json.dumps(["not", "an", "object"]),                          # 7
        json.dumps({"text": "no label here"}),                        # 8 missing label
        json.dumps({"text": 42, "label": "neg"}),                     # 9 non-string text
        json.dumps({"text": "x" * 40, "label": "neg"}),               # 10
    ])
    rep = check_jsonl(f, label_field="label")
    assert rep.lines == 9 and rep.records == 7 and rep.blank_lines == [3]
    assert [n for n, _ in rep.bad_json] == [2]
    assert rep.not_object == [7]
    assert rep.missing_text == [4]
    assert rep.empty_text == [5]
    assert rep.missing_label == [8]
    assert rep.non_string_text == [9]
    assert rep.duplicates == [(6, 1)]
    assert rep.label_counts == {"neg": 4, "pos": 2}
    assert rep.lengths["min"] == 3 and rep.lengths["max"] == 40
    assert rep.total_chars == 11 + 3 + 11 + 13 + 40
    assert rep.token_estimate == rep.total_chars // 4
    assert not rep.ok and rep.errors == 6
    text = format_report(rep)
    for needle in ("line 2:", "lines 4", "lines 5", "lines 6 (= 1)", "lines 7", "lines 8", "lines 9", "neg: 4", "tokens",
                   "→ fix or drop the lines named above", "--text-field NAME"):
        assert needle in text, needle
    json.dumps(rep.to_json())


def test_clean_file_and_integer_labels(tmp_path: Path) -> None:
    f = write(tmp_path / "ok.jsonl", [json.dumps({"text": f"sample {i}", "label": i % 3}) for i in range(30)])
    rep = check_jsonl(f, label_field="label")
    assert rep.ok and rep.records == 30 and rep.label_counts == {"0": 10, "1": 10, "2": 10}
    assert "no errors" in format_report(rep)


def test_not_utf8_and_no_torch(tmp_path: Path) -> None:
    f = tmp_path / "bin.jsonl"
    f.write_bytes(b'{"text": "ok"}\n\xff\xfe{"text": 1}\n')
    rep = check_jsonl(f)
    assert [n for n, _ in rep.bad_json] == [2] and "UTF-8" in rep.bad_json[0][1]
    import gpujob.usecases.datacheck as dc
    assert "torch" not in dc.__dict__
