"""Commands whose work lives in a library module below them (the tokenizer, the data, a task), so that those
modules do not hold command-line code."""
