"""`costmodel.safe_load.key_line`: the line a config error points at."""

from __future__ import annotations

import pytest

from costmodel.safe_load import key_line

JSON = '{\n  "hidden_size": 1024,\n  "text_config": {\n    "num_hidden_layers": 0,\n    "layer_types": [\n' \
       '      "full",\n      "sliding"\n    ]\n  }\n}\n'


@pytest.mark.parametrize(("field", "line"), [
    ("hidden_size", 2),
    ("text_config", 3),
    ("text_config.num_hidden_layers", 4),
    ("text_config.layer_types.1", 7),
    ("text_config.missing", 3),  # a missing key: its parent's line
    ("missing", 1),  # a missing top-level key: the first line
    (None, None),
])
def test_key_line_finds_nested_keys_and_list_items(field: str | None, line: int | None) -> None:
    assert key_line(JSON, field) == line


def test_key_line_of_one_line_json_and_of_text_yaml_cannot_read() -> None:
    assert key_line('{"a": {"b": 1}}', "a.b") == 1
    assert key_line("{\n\t\"a\": 1}", "a") == 2  # JSON indented with tabs
    assert key_line("{ unclosed", "a") is None


def test_a_json_key_twice_is_refused_at_its_second_line_in_its_own_object() -> None:
    """The second key of the one object holding it twice: not an equal key nested elsewhere, not a value."""
    from costmodel.safe_load import InputLimitError, load_json

    text = ('{"text_config": {"num_attention_heads": 32},\n "a": "num_attention_heads",\n'
            ' "num_attention_heads": 16,\n "num_attention_heads": 8}')
    with pytest.raises(InputLimitError, match='the key "num_attention_heads" appears twice') as caught:
        load_json(text)
    assert caught.value.line == 4
    assert load_json('{"a": {"b": 1}, "b": {"a": 2}}') == {"a": {"b": 1}, "b": {"a": 2}}
