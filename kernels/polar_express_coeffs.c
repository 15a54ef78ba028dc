/* kernels/polar_express_coeffs.c — the coefficients of kernels/polar_express.h,
 * in plain C so that the installed verify library (which has nothing of the
 * GPU) declares a kernel's coefficients by the same table the kernels use. */
#include "kernels/polar_express.h"

/* Polar Express (arXiv:2505.16932), num_iters = 5, safety factor 2e-2,
 * cushion 2, as published with modded-nanogpt; rounded to fp32 on use. */
static const double polar_express_abc[KPE_STEPS][3] = {
    {8.156554524902461, -22.48329292557795, 15.878769915207462},
    {4.042929935166739, -2.808917465908714, 0.5000178451051316},
    {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
    {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
    {2.3465413258596377, -1.7097828382687081, 0.42323551169305323},
};
static const double muon_quintic_abc[3] = {3.4445, -4.7750, 2.0315};

void kpe_coefficients(kpe_coeffs which, float coeffs[KPE_STEPS][3])
{
    for (int s = 0; s < KPE_STEPS; s++)
        for (int k = 0; k < 3; k++)
            coeffs[s][k] = (float)(which == KPE_MUON_QUINTIC ? muon_quintic_abc[k] : polar_express_abc[s][k]);
}
