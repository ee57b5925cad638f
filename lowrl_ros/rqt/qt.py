"""The Qt binding: python_qt_binding where ROS 2 installs it (rqt's own shim, so the plugin runs on
whatever binding rqt chose), else PyQt5 directly (python_qt_binding is not on PyPI; the tests here
run on PyQt5==5.15.11 from requirements.txt)."""
from __future__ import annotations

try:
    from python_qt_binding.QtCore import QPointF, QRectF, Qt, QTimer
    from python_qt_binding.QtGui import QBrush, QColor, QFont, QPainter, QPen, QPolygonF
    from python_qt_binding.QtWidgets import (QApplication, QGridLayout, QGroupBox, QHBoxLayout, QLabel, QMessageBox,
                                             QPushButton, QSizePolicy, QTabWidget, QVBoxLayout, QWidget)
except ImportError:
    from PyQt5.QtCore import QPointF, QRectF, Qt, QTimer
    from PyQt5.QtGui import QBrush, QColor, QFont, QPainter, QPen, QPolygonF
    from PyQt5.QtWidgets import (QApplication, QGridLayout, QGroupBox, QHBoxLayout, QLabel, QMessageBox,
                                 QPushButton, QSizePolicy, QTabWidget, QVBoxLayout, QWidget)

__all__ = ["QApplication", "QBrush", "QColor", "QFont", "QGridLayout", "QGroupBox", "QHBoxLayout", "QLabel",
           "QMessageBox", "QPainter", "QPen", "QPointF", "QPolygonF", "QPushButton", "QRectF", "QSizePolicy",
           "QTabWidget", "QTimer", "QVBoxLayout", "QWidget", "Qt"]
