"""The config's ignored/target scope lists (top level, algorithm, each group) combined per
group as NNCF combines them (nncf/common/compression.py, nncf/torch/quantization/algo.py), and
checked against the model's modules and traced operations (validate_scopes)."""

from typing import Any, Dict, List, Mapping, Optional, Tuple

from brevitas_cpp.graph.scopes import ModuleAddresses, ScopeSelection

__all__ = ["ScopeGroups"]


class ScopeGroups:
    """The config's scope lists as ScopeSelections, combined per group as NNCF combines them
    (see graph.nncf's docstring), and checked against the model (validate_scopes)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        algo = config["quantization"]

        def selection(what: str, entries: Optional[List[str]]) -> Optional[ScopeSelection]:
            return None if entries is None else ScopeSelection(what, entries)

        self.top_ignored = selection("ignored_scopes", config["ignored_scopes"])
        self.top_target = selection("target_scopes", config["target_scopes"])
        self.algo_ignored = selection("compression.ignored_scopes", algo["ignored_scopes"])
        self.algo_target = selection("compression.target_scopes", algo["target_scopes"])
        self.groups: Dict[str, Tuple[Optional[ScopeSelection], Optional[ScopeSelection]]] = {}
        # Each selection with the validate_scopes it is checked under.
        self.checked: List[Tuple[ScopeSelection, bool]] = [
            (s, algo["validate_scopes"])
            for s in (self.top_ignored, self.top_target, self.algo_ignored, self.algo_target)
            if s is not None
        ]
        for group in ("weights", "activations"):
            own = algo[group]
            ignored = selection(f"compression.{group}.ignored_scopes", own["ignored_scopes"])
            target = selection(f"compression.{group}.target_scopes", own["target_scopes"])
            self.groups[group] = (ignored, target)
            self.checked += [(s, own["validate_scopes"]) for s in (ignored, target) if s]

    def quantizes(self, group: str, addresses: ModuleAddresses) -> bool:
        """Whether the group quantizes what these addresses name."""
        own_ignored, own_target = self.groups[group]
        target = own_target if own_target is not None else self.algo_target
        for required in (self.top_target, target):
            if required is not None and not required.selects(addresses):
                return False
        ignored = (own_ignored, self.algo_ignored, self.top_ignored)
        return not any(s.selects(addresses) for s in ignored if s is not None)

    def check(self, addresses: List[ModuleAddresses], known: List[str]) -> None:
        """Every entry selects some module or traced operation (an error naming the closest
        addresses, or a warning where validate_scopes is false)."""
        for selection, validate in self.checked:
            for address in addresses:
                selection.selects(address)
            selection.check_all_selected(known, validate)
