"""RA-BIT core: pure computation for sizing LLM serving and training.

Layers import one way: ``pages/`` -> ``dashboard/`` -> ``core/``. Nothing in this
package imports Streamlit, plotting libraries or ``dashboard``, writes files or
keeps global mutable state: every session of the shared dashboard is a thread of
one process.
"""
