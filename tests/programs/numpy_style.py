"""Scientific kernels written in plain NumPy the way people write them: buffers made with
np.empty/np.zeros and filled row by row, in-place updates, histograms, covariance,
Cholesky. Nothing here names aotkit; the tests run each on NumPy and through aotkit.jit."""

from __future__ import annotations

import numpy as np


def rowwise_scale(x):
    n, m = x.shape
    out = np.empty((n, m))  # a NumPy buffer filled with traced rows
    for i in range(n):
        out[i] = x[i] * (i + 1)
    return out


def centered_columns(x):
    out = np.zeros_like(x)
    mean = x.mean(axis=0)
    out[:] = x - mean
    out[0] += 1.0
    return out


def running_sum(x):
    acc = np.copy(x)
    for i in range(1, x.shape[0]):
        acc[i] += acc[i - 1]
    return acc


def blur(image):
    out = np.empty_like(image)
    out[0], out[-1] = image[0], image[-1]
    out[1:-1] = 0.25 * image[:-2] + 0.5 * image[1:-1] + 0.25 * image[2:]
    return out


def histogram_counts(x):
    counts, edges = np.histogram(x, bins=8, range=(-3.0, 3.0))
    return counts, edges


def correlation(samples):
    return np.cov(samples, rowvar=False), np.corrcoef(samples, rowvar=False)


def cholesky_solve(a, b):
    lower = np.linalg.cholesky(a)
    y = np.linalg.solve(lower, b)
    return np.linalg.solve(lower.T, y)


def manual_cholesky(a):
    n = a.shape[0]
    lower = np.zeros((n, n))
    for j in range(n):
        s = a[j, j] - np.dot(lower[j, :j], lower[j, :j])
        lower[j, j] = np.sqrt(s)
        for i in range(j + 1, n):
            lower[i, j] = (a[i, j] - np.dot(lower[i, :j], lower[j, :j])) / lower[j, j]
    return lower


def normalize_in_place(x):
    x -= x.mean()
    x /= x.std()
    return x


def scatter_add(values, index):
    totals = np.zeros(4)
    np.add.at(totals, index, values)
    return totals


def rotate(points, theta):
    # An array built from traced scalars: NumPy cannot hold them, aotkit.numpy can.
    c, s = np.cos(theta), np.sin(theta)
    rotation = np.array([[c, -s], [s, c]])
    center = np.asarray(points).mean(axis=0)
    return (points - center) @ rotation.T + np.array([center[1], center[0]])
