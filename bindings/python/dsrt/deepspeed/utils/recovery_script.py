#!/usr/bin/env python3
# zero_to_fp32.py -- written by dsrt into each checkpoint folder, as DeepSpeed writes its own.
# Consolidates the checkpoint's fp32 weights into one file with torch.save (needs dsrt importable):
#     python zero_to_fp32.py . pytorch_model.bin [-t TAG] [--exclude_frozen_parameters]
import sys

from dsrt.deepspeed.utils.zero_to_fp32 import main

if __name__ == "__main__":
    sys.exit(main())
