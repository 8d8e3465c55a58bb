from load.metrics import cer, char_f1, edit_distance, normalise


def test_normalise_folds_width_case_and_whitespace():
    assert normalise("ＡＢＣ  Total\n\tRM") == "abc total rm"


def test_edit_distance_and_cer():
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance("", "abc") == 3
    assert cer("Hello  World", "hello world") == (0, 11)
    assert cer("abcd", "abxd") == (1, 4)


def test_char_f1_ignores_order_but_not_content():
    assert char_f1("line one\nline two", "line two line one") == 1.0
    assert 0 < char_f1("abcd", "abzz") < 1
    assert char_f1("abc", "") == 0.0
