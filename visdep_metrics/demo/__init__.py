"""`visdep demo`: the whole audit offline on an embedded default."""
