"""A small time plot drawn with QPainter: lines, steps, dots, reference lines, event markers.

No plotting library: the widget redraws a few plots twice a second from tuples the monitor model
already holds, and rqt must not gain a dependency for it (matplotlib is no robot dependency). What
a plot shows is a :class:`Chart` (plain data, built by lowrl_ros/rqt/charts.py from a snapshot), so a
test reads the plotted points without looking at pixels.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from lowrl_ros.rqt.qt import (QBrush, QColor, QFont, QPainter, QPen, QPointF, QPolygonF, QRectF, QSizePolicy, Qt,
                              QWidget)

MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 62, 10, 20, 18


@dataclass(frozen=True)
class Trace:
    """A series to draw: ``line`` (joined points), ``step`` (held until the next point), ``dots``, or ``rug``
    (a tick on the x axis per point, e.g. a deadline miss); ``fill_to`` fills between a step and that y;
    ``label`` is written above the first point."""

    name: str
    points: tuple[tuple[float, float], ...]
    color: str
    style: str = "line"
    width: float = 1.5
    fill_to: float | None = None
    label: str = ""


@dataclass(frozen=True)
class Mark:
    """A reference line: horizontal at y = ``at`` (a limit), or vertical at x = ``at`` (an event)."""

    at: float
    color: str
    label: str = ""
    dashed: bool = True
    label_low: bool = False  # a vertical marker's label at the bottom (apart from the swaps' labels on top)


@dataclass(frozen=True)
class Chart:
    """Everything one plot draws; x is seconds relative to now (``x_range`` = (-window, 0))."""

    title: str = ""
    traces: tuple[Trace, ...] = ()
    hlines: tuple[Mark, ...] = ()
    vlines: tuple[Mark, ...] = ()
    x_range: tuple[float, float] = (-120.0, 0.0)
    y_range: tuple[float, float] = (0.0, 1.0)
    log_y: bool = False
    y_ticks: tuple[tuple[float, str], ...] = ()  # (value, label); empty: chosen from y_range
    legend: tuple[tuple[str, str], ...] = field(default=())  # (text, color), right of the title
    note: str = ""  # written in the middle when there is nothing to draw ("not measured")


def nice_ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    """About ``n`` round values (1, 2 or 5 times a power of ten apart) inside [lo, hi]."""
    lo, hi = min(lo, hi), max(lo, hi)
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 5, 10) if raw <= m * step)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


class Plot(QWidget):
    """Draws its :attr:`chart`; :meth:`show_chart` replaces it and schedules a repaint."""

    def __init__(self, name: str, small: bool = False) -> None:
        super().__init__()
        self.setObjectName(name)
        self.chart = Chart()
        self.setMinimumSize(*((150, 90) if small else (260, 150)))
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Expanding)

    def show_chart(self, chart: Chart) -> None:
        self.chart = chart
        self.update()

    def traces(self) -> dict[str, Trace]:
        """The drawn traces by name (what a test compares to the model's series)."""
        return {t.name: t for t in self.chart.traces}

    # ---- drawing ----------------------------------------------------------------------------------
    def _y_ticks(self) -> tuple[tuple[float, str], ...]:
        c = self.chart
        return c.y_ticks or tuple((y, f"{y:g}") for y in nice_ticks(*c.y_range, 3))

    def _area(self, metrics=None) -> QRectF:
        left = MARGIN_LEFT
        if metrics is not None:  # as wide as the widest y label ("decimated", "20000")
            left = 8 + max([metrics.boundingRect(label).width() for _, label in self._y_ticks()] + [20])
        return QRectF(left, MARGIN_TOP, max(1, self.width() - left - MARGIN_RIGHT),
                      max(1, self.height() - MARGIN_TOP - MARGIN_BOTTOM))

    def _x(self, area: QRectF, x: float) -> float:
        x0, x1 = self.chart.x_range
        return area.left() + (x - x0) / (x1 - x0) * area.width()

    def _y(self, area: QRectF, y: float) -> float:
        lo, hi = self.chart.y_range
        if self.chart.log_y:
            y, lo, hi = (math.log10(max(v, 1e-12)) for v in (y, lo, hi))
        frac = (y - lo) / (hi - lo) if hi != lo else 0.5
        return area.bottom() - min(1.05, max(-0.05, frac)) * area.height()

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        c = self.chart
        p = QPainter(self)
        p.setRenderHint(QPainter.Antialiasing)
        font = QFont(self.font())
        font.setPointSizeF(max(7.0, font.pointSizeF() - 1))
        p.setFont(font)
        p.fillRect(self.rect(), QColor("white"))
        area = self._area(p.fontMetrics())
        p.setPen(QPen(QColor("#cccccc"), 1))
        p.drawRect(area)
        self._axes(p, area)
        p.setClipRect(area.adjusted(-1, -1, 1, 1))
        for ys, labels, color in self._hline_groups(area):
            for y, mark in ys:
                p.setPen(self._pen(mark.color, 1.2, mark.dashed))
                p.drawLine(QPointF(area.left(), y), QPointF(area.right(), y))
            if labels:
                top = ys[0][0]
                p.setPen(QColor(color))
                box = QRectF(area.left(), top - 14, area.width() - 3, 13) if top - 14 > area.top() \
                    else QRectF(area.left(), top + 1, area.width() - 3, 13)
                p.drawText(box, Qt.AlignRight | Qt.AlignVCenter, labels)
        for trace in c.traces:
            self._trace(p, area, trace)
        free = {False: area.left(), True: area.left()}  # where the next label may start, on top and at the bottom
        for mark in sorted(c.vlines, key=lambda m: m.at):
            x = self._x(area, mark.at)
            p.setPen(self._pen(mark.color, 1.0, mark.dashed))
            p.drawLine(QPointF(x, area.top()), QPointF(x, area.bottom()))
            if mark.label and x + 2 >= free[mark.label_low]:  # dense changes: a label only where it fits
                p.drawText(QPointF(x + 2, area.bottom() - 4 if mark.label_low else area.top() + 11), mark.label)
                free[mark.label_low] = x + 8 + p.fontMetrics().boundingRect(mark.label).width()
        if c.note and not any(t.points for t in c.traces):
            p.setPen(QColor("#9e9e9e"))
            p.drawText(area, Qt.AlignCenter, c.note)
        p.setClipping(False)
        p.setPen(QColor("black"))
        bold = QFont(font)
        bold.setBold(True)
        p.setFont(bold)
        legend_w = sum(p.fontMetrics().boundingRect(text).width() + 12 for text, _ in c.legend)
        title = p.fontMetrics().elidedText(c.title, Qt.ElideRight, int(self.width() - 8 - legend_w))
        p.drawText(QRectF(4, 2, self.width() - 8, MARGIN_TOP - 3), Qt.AlignLeft | Qt.AlignVCenter, title)
        p.setFont(font)
        x = self.width() - MARGIN_RIGHT
        for text, color in reversed(c.legend):  # right-aligned, last entry rightmost
            x -= p.fontMetrics().boundingRect(text).width()
            p.setPen(QColor(color))
            p.drawText(QPointF(x, MARGIN_TOP - 6), text)
            x -= 12
        p.end()

    def _hline_groups(self, area: QRectF) -> list[tuple[list, str, str]]:
        """Reference lines closer than a text line share one label ("warn 250 / limit 200"), over the top one."""
        marks = sorted(((self._y(area, m.at), m) for m in self.chart.hlines), key=lambda ym: ym[0])
        groups: list[list] = []
        for y, m in marks:
            if groups and y - groups[-1][-1][0] < 14:
                groups[-1].append((y, m))
            else:
                groups.append([(y, m)])
        return [(g, " / ".join(m.label for _, m in g if m.label), g[0][1].color) for g in groups]

    @staticmethod
    def _pen(color: str, width: float, dashed: bool = False) -> QPen:
        pen = QPen(QColor(color), width)
        if dashed:
            pen.setStyle(Qt.DashLine)
        return pen

    def _axes(self, p: QPainter, area: QRectF) -> None:
        c = self.chart
        p.setPen(QColor("#555555"))
        x0, x1 = c.x_range
        for x in nice_ticks(x0, x1, max(2, int(area.width() // 110))):
            px = self._x(area, x)
            p.drawLine(QPointF(px, area.bottom()), QPointF(px, area.bottom() + 3))
            box = QRectF(px - 60, area.bottom() + 2, 60, MARGIN_BOTTOM - 2) if x == x1 \
                else QRectF(px - 30, area.bottom() + 2, 60, MARGIN_BOTTOM - 2)
            p.drawText(box, (Qt.AlignRight if x == x1 else Qt.AlignHCenter) | Qt.AlignTop,
                       "now" if x == 0 else f"{x:g} s")
        for y, label in self._y_ticks():
            py = self._y(area, y)
            p.setPen(QColor("#eeeeee"))
            p.drawLine(QPointF(area.left(), py), QPointF(area.right(), py))
            p.setPen(QColor("#555555"))
            p.drawText(QRectF(0, py - 8, area.left() - 4, 16), Qt.AlignRight | Qt.AlignVCenter, label)

    def _trace(self, p: QPainter, area: QRectF, t: Trace) -> None:
        pts = [QPointF(self._x(area, x), self._y(area, y)) for x, y in t.points]
        if not pts:
            return
        color = QColor(t.color)
        if t.style == "dots":
            p.setPen(QPen(color.darker(130), 1))
            p.setBrush(QBrush(color))
            for q in pts:
                p.drawEllipse(q, 2.6 * t.width, 2.6 * t.width)
            p.setBrush(Qt.NoBrush)
        elif t.style == "rug":
            p.setPen(QPen(color, 2))
            for q in pts:
                p.drawLine(QPointF(q.x(), area.bottom()), QPointF(q.x(), area.bottom() - 8))
        else:
            if t.style == "step":
                held = [pts[0]]
                for q in pts[1:]:
                    held += [QPointF(q.x(), held[-1].y()), q]
                held.append(QPointF(area.right(), held[-1].y()))
                pts = held
            if t.fill_to is not None:
                base = self._y(area, t.fill_to)
                fill = QColor(color)
                fill.setAlpha(60)
                p.setPen(Qt.NoPen)
                p.setBrush(QBrush(fill))
                p.drawPolygon(QPolygonF([QPointF(pts[0].x(), base), *pts, QPointF(pts[-1].x(), base)]))
                p.setBrush(Qt.NoBrush)
            p.setPen(QPen(color, t.width))
            p.drawPolyline(QPolygonF(pts))
        if t.label:  # kept inside the plot when the first point is near its right edge
            p.setPen(color.darker(120))
            x = min(pts[0].x() + 2, area.right() - 2 - p.fontMetrics().boundingRect(t.label).width())
            p.drawText(QPointF(x, pts[0].y() - 4), t.label)
