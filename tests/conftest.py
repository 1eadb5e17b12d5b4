import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Token ids and the base side of the cost check are not memoised in the user cache by
# tests; test_token_cache and test_base_cache turn them on.
os.environ.setdefault("SWAPPRUNE_TOKEN_CACHE", "0")
os.environ.setdefault("SWAPPRUNE_BASE_CACHE", "0")

import torch  # noqa: E402

# Tiny models gain nothing from threads, and on a shared 2-core machine
# oversubscription makes them many times slower.
torch.set_num_threads(1)
