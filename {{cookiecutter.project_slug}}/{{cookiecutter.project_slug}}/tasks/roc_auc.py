"""ROC AUC, the classifier's metric that is not a sum: computed on the host from every eval example's class
probabilities, which evaluation reads once after its last batch (loop/evaluation.py)."""

import torch


def roc_auc(labels, probabilities) -> float | None:
    """As scikit-learn's roc_auc_score(labels, probabilities, multi_class="ovr", average="macro"): two labels, the AUC
    of label 1's probability; more, the mean of each label's AUC against the rest. A label absent from the eval set
    (or the only one present) has no AUC: scikit-learn raises; here it is left out of the mean, None if none has one.
    """
    labels, probabilities = torch.as_tensor(labels), torch.as_tensor(probabilities, dtype=torch.float64)
    if probabilities.shape[1] == 2:
        return _area_under_roc(labels == 1, probabilities[:, 1])
    areas = [_area_under_roc(labels == label, probabilities[:, label]) for label in range(probabilities.shape[1])]
    areas = [area for area in areas if area is not None]
    return sum(areas) / len(areas) if areas else None


def _area_under_roc(positive, score) -> float | None:
    """The chance that a positive outscores a negative, a tie counting half: the ROC curve's area with tied scores as
    one threshold (scikit-learn's diagonal step). By ranks (Mann-Whitney U): the positives' ranks among all scores,
    tied ones sharing their mean rank, less those they would have among themselves. None for a score not finite."""
    positives = int(positive.sum())
    negatives = positive.numel() - positives
    if not positives or not negatives or not torch.isfinite(score).all():
        return None
    ordered, order = torch.sort(score)
    _, group, sizes = torch.unique_consecutive(ordered, return_inverse=True, return_counts=True)
    ranks = (sizes.cumsum(0).to(torch.float64) - (sizes - 1) / 2)[group]  # each tied group's mean rank, from 1
    return (ranks[positive[order]].sum().item() - positives * (positives + 1) / 2) / (positives * negatives)
