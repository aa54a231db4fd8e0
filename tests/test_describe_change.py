"""diagnose.describe_change: an input changed in place is described so a learner can find it
(a tensor's shape, dtype or first changed element; a long list's length or first changed item),
never as a repr cut off in the middle of a tensor."""
import torch

from kvlab.check.diagnose import changed_input, describe_change


def test_tensor_element_named_by_index():
    a = torch.zeros(4, 8)  # [rows, dim]
    b = a.clone()
    b[2, 3], b[3, 0] = 1.5, 2.0
    assert describe_change(a, b) == "2 elements changed, the first at [2, 3]: 0.0 became 1.5"
    one = a.clone()
    one[0, 7] = -1.0
    assert describe_change(a, one) == "1 element changed, at [0, 7]: 0.0 became -1.0"


def test_tensor_shape_and_dtype():
    a = torch.zeros(4, 8)
    assert describe_change(a, a[:2]) == "its shape (4, 8) became (2, 8)"
    assert describe_change(a, a.half()) == "its dtype torch.float32 became torch.float16"


def test_long_list_length_and_item():
    assert describe_change(list(range(30)), list(range(29))) == "its length 30 became 29"
    after = list(range(30))
    after[17] = -3
    assert describe_change(list(range(30)), after) == "item 17 17 became -3"


def test_short_values_and_message():
    msg = changed_input(([1, 2], 3), ([1], 3), ("leaves", "need"))
    assert msg.startswith("it changed its argument `leaves` in place ([1, 2] became [1])")
    assert changed_input(([1, 2],), ([1, 2],), ("leaves",)) is None
    long = "x" * 60
    assert describe_change(long, long + "y").endswith("...")
    assert len(describe_change(long, long + "y")) <= 2 * 40 + len(" became ")
