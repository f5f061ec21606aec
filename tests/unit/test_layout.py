"""The test folders decide the tiers (``tests/conftest.py``): a test is marked by its folder, and
one whose tier marker disagrees with its folder stops the run."""

import pytest

from tests import conftest


class Item:
    """What the hook reads of a collected test: its path, node id and markers."""

    def __init__(self, folder: str, *markers: str):
        self.path = conftest.TESTS / folder / "test_x.py"
        self.nodeid = f"tests/{folder}/test_x.py::test_x"
        self.markers = set(markers)

    def get_closest_marker(self, name):
        return name if name in self.markers else None

    def add_marker(self, name):
        self.markers.add(name)


def test_each_folder_gives_its_marker():
    items = [Item("unit"), Item("cli"), Item("slow"), Item("multiprocess"), Item("slow", "slow")]
    conftest.pytest_collection_modifyitems(None, items)
    assert [item.markers for item in items] == [set(), {"cli"}, {"slow"}, {"multiprocess"}, {"slow"}]


@pytest.mark.parametrize(
    ("folder", "marker"),
    [
        ("unit", "slow"),
        ("unit", "multiprocess"),
        ("cli", "slow"),
        ("cli", "multiprocess"),
        ("slow", "multiprocess"),
    ],
)
def test_a_tier_marker_outside_its_folder_is_refused(folder, marker):
    with pytest.raises(pytest.UsageError, match=f"tests/{folder}/test_x.py::test_x: marked {marker} but in"):
        conftest.pytest_collection_modifyitems(None, [Item("unit"), Item(folder, marker)])


def test_a_test_outside_the_tier_folders_is_refused():
    with pytest.raises(pytest.UsageError, match="outside tests/"):
        conftest.pytest_collection_modifyitems(None, [Item("recipes")])
