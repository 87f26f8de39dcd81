"""Text in and out of token ids: the codecs (``codec``), the checks of prompts, token ids and ``tokenizer=`` before a
codec reads them (``prompts``), and a chat prompt rendered once as transformers does, naming a field it prints that
the messages lack (``chat_fields``, with ``chat_marks``: how that render notes such a field).

The names a notebook meets (a codec, the refusal of a model without a tokenizer) are importable from here.
"""

from rlnb.text.codec import ByteCodec, Codec, NoTokenizer, TemplateRefused, TokenizerCodec

__all__ = ["ByteCodec", "Codec", "NoTokenizer", "TemplateRefused", "TokenizerCodec"]
