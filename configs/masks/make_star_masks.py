#!/usr/bin/env python3
"""Regenerate the "star" masks star3.h5 and star4.h5 (token i attends to token 0 and itself).

usage: /usr/bin/python3 configs/masks/make_star_masks.py
"""
import os

import h5py
import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
for n in (3, 4):
    m = np.eye(n, dtype=np.uint8)
    m[:, 0] = 1
    with h5py.File(os.path.join(here, f"star{n}.h5"), "w") as f:
        f["mask"] = m
