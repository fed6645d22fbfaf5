"""The version of evalcore, apart from the package so that any module may name it.

``evalcore/__init__.py`` hands it on as ``evalcore.__version__``; a module of the
package imports it from here, which loads nothing else.
"""

__version__ = "0.1.0"
