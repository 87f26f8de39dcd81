"""What a person sees of a run: matplotlib figures (``plots``) and the live view (``live``, drawn by
``livefig``) that a notebook refreshes as operations finish."""
