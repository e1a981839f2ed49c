"""Timers of the supervisor: named deadlines in one heap.

Setting a name again moves its deadline, clearing it cancels it; the entries left
behind in the heap are skipped when they come up. Each operation costs O(log n), so
asking "what is due next?" after every event costs the same at 10 processes as at
1,000 (it once scanned every process).
"""

from __future__ import annotations

import heapq


class Deadlines:
    def __init__(self):
        self._heap: list[tuple[float, str]] = []
        self._when: dict[str, float] = {}

    def set(self, name: str, when: float) -> None:
        self._when[name] = when
        heapq.heappush(self._heap, (when, name))

    def __contains__(self, name: str) -> bool:
        return name in self._when

    def clear(self, name: str) -> None:
        self._when.pop(name, None)

    def earliest(self) -> float | None:
        heap = self._heap
        while heap and self._when.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # moved or cleared since it was set
        return heap[0][0] if heap else None

    def due(self, now: float) -> list[str]:
        """The names whose deadline has come, earliest first (cleared: each once)."""
        names = []
        while (when := self.earliest()) is not None and when <= now:
            names.append(heapq.heappop(self._heap)[1])
            del self._when[names[-1]]
        return names
