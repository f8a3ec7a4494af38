"""One module per chapter: its example data, figures, widget builders and exercise checkers.

A notebook imports its chapter module, e.g.

    from transformer_course.chapters import ch01_attention as ch

so that the notebook cells stay short and everything not a one-liner is tested in `tests/`.
"""
