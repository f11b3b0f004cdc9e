"""Documents, not only lines: formats read into units with inline markup, sentences out and back.

``model`` (units and inline elements), ``segment`` (sentences, long ones cut to fit), ``project``
(inline elements carried onto a translation by word alignment), ``plan`` (units -> sentences ->
translated units), ``formats`` (one reader and writer per file format), ``language`` (which of the
given languages a text is in: lingua). Nothing here loads torch: the
caller translates the sentences (``mt.decode.Translator`` or mt-serve's worker) and hands them back.
"""
