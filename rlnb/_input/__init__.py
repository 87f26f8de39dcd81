"""What a user gives rlnb, checked and shown: ``checks`` (one value an entry point takes, refused naming the option
and what it takes), ``options`` (option groups: keywords sorted into small frozen dataclasses that check their
fields), ``shown`` (a value as every error message repeats it) and ``scalars`` (a numpy or torch 0-d value as the
Python scalar it holds).

Standard library only, and this file imports none of them: the command line checks its arguments without numpy,
torch or pydantic (``rlnb --help``'s time), and ``wire``, one layer up, takes ``shown`` and ``scalars`` from here.
"""
