"""Stores and reading from them: where an array's bytes live (``stores``), where each chunk's bytes are
(``units``), and the host readers that fetch them (``readers``); Icechunk repositories and kerchunk
references beside them."""
