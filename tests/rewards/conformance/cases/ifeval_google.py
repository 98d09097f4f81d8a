"""Cases of Google's IFEval unit tests, transcribed as data.

Source: google-research/google-research, instruction_following_eval/instructions_test.py (commit
45e9105107b32edd1c0e88af4e129541f1caad7c) and instructions_util_test.py (commit
5b09c22d73a9d35eb6c5d2a99b95677a45053466). Copyright The Google Research Authors, licensed under
the Apache License, Version 2.0 (http://www.apache.org/licenses/LICENSE-2.0). The response texts,
keyword arguments and expected outcomes below are theirs, copied unchanged; the layout (one row
per assertion) is rlvr's. No code of theirs is used.

Each row: (name, constraint id as rlvr registers it, kwargs, response, expected). `expected` is
True / False for the checker's verdict, or "error" where the reference refuses the kwargs.
Reference ids that differ from the registry's (`keywords:include_keywords`,
`detectable_format:exact_number_bullet_points`, ...) are given under the registry's id.
`COUNTS` rows are instructions_util_test's counters: (name, kind, text, expected count).
`NOT_RUNNABLE` names the assertions with no rlvr counterpart, and why.
"""

SOURCE = {
    "name": "google-ifeval",
    "repository": "google-research/google-research",
    "paths": ["instruction_following_eval/instructions_test.py",
              "instruction_following_eval/instructions_util_test.py"],
    "commit": "45e9105107b32edd1c0e88af4e129541f1caad7c",
    "licence": "Apache-2.0",
}

LESS, AT_LEAST = "less than", "at least"

BULLET_TEST_MESSAGE_1 = """
  A Markdown bullet point is a way of formatting text to create a list. To
  create a bullet point, start each line with an asterisk (*). For example:
  * This is a bullet point.
  *(no space required)Another bullet point.
  * (no newline ending required)Another bullet point.
  markdown bullet points are often used to create to-do lists or to list items
  in a step-by-step guide."""
BULLET_TEST_MESSAGE_2 = """
  Check that inline asterisk (*), *, will not be counted. Only * that starts a
  bullet list will be counted:
    * This is a bullet point.
    * Another bullet point.
    . dot is not counted"""
BULLET_TEST_MESSAGE_3 = """
  Here are three bullets starting with asterisk:
  * I am a large language model, also known as a conversational AI.
  * I am trained on a massive amount of text data, and I am able to communicate.
  * I am still under development, but I am learning new things every day."""
BULLET_TEST_MESSAGE_4 = """
  Here are three markdown bullets:
  - I am a large language model, also known as a conversational AI.
  - I am trained on a massive amount of text data, and I am able to communicate.
  -I am still under development, but I am learning new things every day."""
BULLET_TEST_MESSAGE_5 = """
  Paragraph 1
  ***
  Paragraph 2
  ***
  Paragraph 3
  * only one bullet point
  """

CONSTRAINED_RESPONSE_TEST_RESPONSE_1 = """\n My answer is no.\n"""
CONSTRAINED_RESPONSE_TEST_RESPONSE_2 = """My answer is no.   """
CONSTRAINED_RESPONSE_TEST_RESPONSE_3 = """
  My answer is no. I am still under development and I am always learning and
  improving. I am not the best chatbot in the world, but I am striving to be
  the best that I can be."""

HIGHLIGHTED_TEST_MESSAGE_1 = """
  To highlight text with Markdown, you can use the * character before and after
  the text you want to highlight. For example, if you want to highlight the
  word `hello`, you would type:*hello*, You can also use the ** character to
  create bold text. For example, if you want to bold the word `hello`, you
  would type: **hello** """
HIGHLIGHTED_TEST_MESSAGE_2 = """
  Sure, here are the numerical methods for solving partial differential
  equations highlighted with Markdown:
  *Finite difference methods
  *Finite element methods*
  *Boundary element methods
  *Monte Carlo methods
  I hope this helps!"""
HIGHLIGHTED_TEST_MESSAGE_3 = """
  There is allowed to be *two different* highlighted *sections in the same*
  line. **This is also true** for **double markdown highlights.**
  """

SECTION_TEST_MESSAGE_1 = """
  Your response must have multiple sections. Mark the beginning of each section
  with "Section X", such as:
  Section 1
  [content of section 1]
  Section 2
  [content of section 2]"""
SECTION_TEST_MESSAGE_2 = """SECTION 1
  [content of section 1]
  SECTION 2
  [content of section 2]"""

PARAGRAPH_TEST_MESSAGE_1 = """
  paragraph 1
  ***
  paragraph 2
  ***
  paragraph 3"""
PARAGRAPH_TEST_MESSAGE_2 = """
          ***
  paragraph 1
          ***
      paragraph 2
          ***
      paragraph 3"""
PARAGRAPH_TEST_MESSAGE_3 = """
  paragraph 1
          ***
      paragraph 2
          ***
      paragraph 3
          ***"""
PARAGRAPH_TEST_MESSAGE_4 = """
  paragraph 1
          ***
      paragraph 2
          ***
          ***"""

POSTSCRIPT_TEST_MESSAGE_1 = """
  I will do my best to follow your instructions and always start my responses
  with "My response is:". I will try to be as consistent as possible, but
  please be patient with me if I make a mistake. I am still under development,
  and I am always learning new things.

  P.S. I hope this is what you were looking for."""
POSTSCRIPT_TEST_MESSAGE_2 = """
  Sure, here is my response with a postscript starting with P.P.S.:

  My response is: I hope this answers your question.

  P.P.S. I am always happy to answer any other questions you may have.

  Do you have any other questions for me?"""
POSTSCRIPT_TEST_MESSAGE_3 = """
  The radius of a unit circle is 1. However, I can give you a funny and wrong
  answer: the radius of a unit circle is 0. This is because a unit circle is a
  circle with a radius of 1, and if the radius is 0, then the circle has no
  size and is just a point. (not starting a new line) P.S. I hope you enjoyed
  my joke!"""
POSTSCRIPT_TEST_MESSAGE_4 = """
  If the length of a square is one, the area of the square will also be one.
  p.p.s what if the entire response was lower case letters?
  """
POSTSCRIPT_TEST_MESSAGE_5 = """
  The mysteries of space and time are mysterious.
  P. S. Sometimes there are even spaces between P. and S..
  """

TEST_INCLUDE_KEYWORD_MESSAGE_1 = """
  Paris is a city of beauty and romance. The romantic river Seine winds its way
  through the city, past iconic landmarks like the Eiffel Tower and the Louvre
  Museum, where the Mona Lisa resides. Whether you're taking a boat cruise down
  the river or simply strolling along the banks, you're sure to be captivated
  by the city's charm."""
TEST_INCLUDE_KEYWORD_MESSAGE_2 = """
  Paris is a city of beauty, romance, and history. It is home to some of the
  most iconic landmarks in the world, including the Eiffel Tower, the Louvre
  Museum, and the Notre Dame Cathedral. The city is also known for its romantic
  river cruises, its delicious food, and its stylish people.
  """
KEYWORDS = ["romantic", "river", "Mona Lisa"]

TEST_KEYWORD_FREQUNECY_MESSAGE_1 = """
  keyword, Keyword, KEYWORD
  """
TEST_KEYWORD_FREQUENCY_KEYWORD_1 = "  keyword "
TEST_KEYWORD_FREQUNECY_MESSAGE_2 = """
    *keyword
    *Keyword
    *KEYWORD
  """
TEST_KEYWORD_FREQUENCY_KEYWORD_2 = "KEYWORD"

TEST_NUM_WORDS_MESSAGE_1 = """
  d3sCRi7 lArge lAnguagE M0del w1tH 20 w0RdS."""
TEST_NUM_WORDS_MESSAGE_2 = """
  L4RGE L4NGU4GE M0DEL: AI syst3m th4t und3rstands, g3n3r4tes, or tr4nsforms
  l4ngu4g3 b4s3d on pr3vious l3arning & d4t4."""

PARAGRAPH_FIRST_WORD_TEST_1 = """
  paragraph 1

  I paragraph 2

  paragraph 3"""
PARAGRAPH_FIRST_WORD_TEST_2 = """
  paragraph 1

  I paragraph 2"""
PARAGRAPH_FIRST_WORD_TEST_3 = """
  paragraph 1

  fail paragraph 2

  paragraph 3"""
PARAGRAPH_FIRST_WORD_TEST_4 = """
  Wow this is a very long response.

  I can't believe there is more than three paragraphs.

  Really more than three? No way!

  I can't believe it but I guess I am living proof.

  Haha, you go that right."""
PARAGRAPH_FIRST_WORD_TEST_5 = """
  Wow this is a very long response.

  I can't believe there is more than three paragraphs.

  "Really?! more than three? No way!"

  I can't believe it but I guess I am living proof.

  Haha, you go that right."""
PARAGRAPH_FIRST_WORD_TEST_6 = """
  Wow this is a very long response.

  I can't believe there is more than three paragraphs.

  Rea!lly more than three? No way!

  I can't believe it but I guess I am living proof.

  Haha, you go that right."""

TEST_FORBIDDEN_WORDS_MESSAGE_1 = """
  The Nazis came to power in 1933 through a combination of legal and illegal
  means. Hitler was appointed chancellor by President Paul von Hindenburg, and
  the Nazis quickly consolidated their power by passing a series of laws that
  restricted the rights of opposition parties and individuals. By 1934, Hitler
  had become dictator of Germany.
  """
TEST_FORBIDDEN_WORDS_MESSAGE_2 = """
  Dinosaurs were a diverse group of reptiles that dominated the Earth for over
  160 million years. They came in all shapes and sizes, from the tiny
  Compsognathus to the massive Argentinosaurus. Dinosaurs were the most
  successful land animals on Earth until they went extinct about 66 million
  years ago. The exact cause of their extinction is still unknown, but it
  is thought to have been a combination of factors, including an asteroid
  impact and climate change.
  """
TEST_FORBIDDEN_WORDS_MESSAGE_3 = """
  GPT, or Generative Pre-trained Transformer, is a family of neural network
  models that uses the transformer architecture. GPT models are trained on a
  massive dataset of text and code, and can be used for a variety of tasks,
  including text generation, translation, and question answering. GPT models
  have been shown to be very effective at these tasks, and are being used by
  a variety of companies and organizations like Google.
  """
FORBIDDEN_WORDS_1 = ["HOUSE", "POWER", "BECOME"]
FORBIDDEN_WORDS_2 = ["GOOGLE", "TEXT"]
FORBIDDEN_WORDS_3 = ["GENE", "TRANSFORM"]

TEST_TWO_RESPONSES_1 = """
  This is response 1.
  ******
  This is response 2.
  """
TEST_TWO_RESPONSES_2 = """
  This is response 1.
  ******
  This is response 1.
  """
TEST_TWO_RESPONSES_3 = """
  This is response 1.
  ******
  This is response 2.
  ******
  This is response 3.
  """
TEST_TWO_RESPONSES_4 = """
  ******
  Response 1.
  ******
  ******
  Response 2.
  ******
  """
TEST_TWO_RESPONSES_5 = """
  ******
  Response 1
  ******
  Response 2
  ******
  """

PROMPT_TO_REPEAT = "Write a CL description."
TEST_PROMPT_ANSWER_1 = """Write a CL description. Hi, Le and TJ, please
  check this out. Thanks.
  """
TEST_PROMPT_ANSWER_2 = """Hi, Le and TJ. Write a CL description. Thanks.
  """

TEST_END_CHECKER_1 = """
  The answer is 7. Any more questions?
  """
TEST_END_CHECKER_2 = """
  At the end of this prompt I am required to say that this is the end.
  """
TEST_END_CHECKER_3 = """
  This will fail. Paris is cool.
  """
END_PHRASE_1 = """
  Any more questions?
  """
END_PHRASE_2 = """
  This is the end.
  """
END_PHRASE_3 = """
  This will fail.
  """

TEST_TITLE_MESSAGE_1 = """
  <<Song of Joy>>
  La la la. Happy song.
  """
TEST_TITLE_MESSAGE_2 = """
  Is it fine for title to be at the end?
  <<This is the title>>
  """
TEST_TITLE_MESSAGE_3 = """
  << >>
  There is no title.
  """
TEST_TITLE_MESSAGE_4 = """
  <<This is not a title.
  This is a paragraph.>>
  """

TEST_LETTER_FREQUENCY_MESSAGE_1 = """
  There is the T. Four T's.
  """
TEST_LETTER_FREQUENCY_MESSAGE_2 = """
  asdfghjkl!!aA
  """

TEST_ENGLISH_CAPITAL_1 = """
  THIS IS AN ENGLISH SENTENCE. EVERY LETTER IS CAPITALIZED!!! AMAZING.
  """
TEST_ENGLISH_CAPITAL_2 = """
  Every Word Is Capitalized.
  """
TEST_ENGLISH_LOWERCASE_1 = """
  every letter is lowercase.
  """
TEST_ENGLISH_LOWERCASE_2 = """
  Almost every letter is lowercase.
  """
TEST_COMMA_MESSAGE_1 = """
  Every sentence is short. There is no need for a comma.
  """
TEST_COMMA_MESSAGE_2 = """
  Since the start of time, people have always found a way to punctuate.
  """
TEST_CAPITAL_WORD_FREQUENCY_MESSAGE_1 = """
  HERE there are THREE FUlly CAPITAL words.
  """
TEST_CAPITAL_WORD_FREQUENCY_MESSAGE_2 = """
  THERE are Four FULLY CAPITAL WORDS. Many Others Are Only Partially So.
  """
TEST_QUOTATION_MESSAGE_1 = """
  "This entire message is wrapped in double quotation marks."
  """
TEST_QUOTATION_MESSAGE_2 = """
  "This message is wrapped in double quotation marks." But not everything.
  """

TEMPLATE_5_PLACEHOLDERS = ("Sure, here is a short template with 5 placeholders:\n"
                           + "[Name]\n[Email]\n[Phone]\n[Address]\n[Website]\n"
                           + "This template can be used for a variety of purposes, such "
                           + "ascreating a contact list, sending out surveys, or creating "
                           + "a sign-up form.")
TEMPLATE_7_PLACEHOLDERS = "My [adjective] [noun] is [adjective] [noun]. I [verb] and " + "[verb]."

_T = "instructions_test.py::"
CASES = [
    (_T + "test_response_language[en]", "language:response_language", {"language": "en"},
     "The response is English", True),
    (_T + "test_response_multilanguage[es]", "language:response_language", {"language": "es"},
     "Desayunamos en McDonald's hoy", True),
    (_T + "test_response_multilanguage[en]", "language:response_language", {"language": "en"},
     "Today we visit the Louvre", True),
    (_T + "test_number_sentences[0]", "length_constraints:number_sentences",
     {"relation": LESS, "num_sentences": 4}, "xx,x. xx,x! xx/x. x{x}x?", False),
    (_T + "test_number_sentences[1]", "length_constraints:number_sentences",
     {"relation": LESS, "num_sentences": 5}, "xxxx. xx,x! xxxx. x(x)x?", True),
    (_T + "test_number_sentences[2]", "length_constraints:number_sentences",
     {"relation": AT_LEAST, "num_sentences": 4}, "xxxx. xx,x! xx|x. x&x x?", True),
    (_T + "test_number_sentences[3]", "length_constraints:number_sentences",
     {"relation": AT_LEAST, "num_sentences": 5}, "xx-x. xx,x! xx}x. x,xx?", False),
    (_T + "test_number_placeholders[0]", "detectable_content:number_placeholders",
     {"num_placeholders": 5}, TEMPLATE_5_PLACEHOLDERS, True),
    (_T + "test_number_placeholders[1]", "detectable_content:number_placeholders",
     {"num_placeholders": 7}, TEMPLATE_7_PLACEHOLDERS, False),
    (_T + "test_number_bullet_lists[1]", "detectable_format:number_bullet_lists",
     {"num_bullets": 3}, BULLET_TEST_MESSAGE_1, True),
    (_T + "test_number_bullet_lists[2]", "detectable_format:number_bullet_lists",
     {"num_bullets": 2}, BULLET_TEST_MESSAGE_2, True),
    (_T + "test_number_bullet_lists[3]", "detectable_format:number_bullet_lists",
     {"num_bullets": 3}, BULLET_TEST_MESSAGE_3, True),
    (_T + "test_number_bullet_lists[4]", "detectable_format:number_bullet_lists",
     {"num_bullets": 3}, BULLET_TEST_MESSAGE_4, True),
    (_T + "test_number_bullet_lists[5]", "detectable_format:number_bullet_lists",
     {"num_bullets": 1}, BULLET_TEST_MESSAGE_5, True),
    (_T + "test_constrained_response[1]", "detectable_format:constrained_response", {},
     CONSTRAINED_RESPONSE_TEST_RESPONSE_1, True),
    (_T + "test_constrained_response[2]", "detectable_format:constrained_response", {},
     CONSTRAINED_RESPONSE_TEST_RESPONSE_2, True),
    (_T + "test_constrained_response[3]", "detectable_format:constrained_response", {},
     CONSTRAINED_RESPONSE_TEST_RESPONSE_3, True),
    (_T + "test_number_highlights[1]", "detectable_format:number_highlighted_sections",
     {"num_highlights": 2}, HIGHLIGHTED_TEST_MESSAGE_1, True),
    (_T + "test_number_highlights[2]", "detectable_format:number_highlighted_sections",
     {"num_highlights": 2}, HIGHLIGHTED_TEST_MESSAGE_2, False),
    (_T + "test_number_highlights[3]", "detectable_format:number_highlighted_sections",
     {"num_highlights": 4}, HIGHLIGHTED_TEST_MESSAGE_3, True),
    (_T + "test_section_checker[Section-3]", "detectable_format:multiple_sections",
     {"section_spliter": "Section", "num_sections": 3}, SECTION_TEST_MESSAGE_1, False),
    (_T + "test_section_checker[SECTION-2]", "detectable_format:multiple_sections",
     {"section_spliter": "SECTION", "num_sections": 2}, SECTION_TEST_MESSAGE_2, True),
    (_T + "test_paragraph_checker[1]", "length_constraints:number_paragraphs",
     {"num_paragraphs": 3}, PARAGRAPH_TEST_MESSAGE_1, True),
    (_T + "test_paragraph_checker[2]", "length_constraints:number_paragraphs",
     {"num_paragraphs": 3}, PARAGRAPH_TEST_MESSAGE_2, True),
    (_T + "test_paragraph_checker[3]", "length_constraints:number_paragraphs",
     {"num_paragraphs": 3}, PARAGRAPH_TEST_MESSAGE_3, True),
    (_T + "test_paragraph_checker[4]", "length_constraints:number_paragraphs",
     {"num_paragraphs": 2}, PARAGRAPH_TEST_MESSAGE_4, False),
    (_T + "test_postscript_checker[P.S.-1]", "detectable_content:postscript",
     {"postscript_marker": "P.S."}, POSTSCRIPT_TEST_MESSAGE_1, True),
    (_T + "test_postscript_checker[PS:-1]", "detectable_content:postscript",
     {"postscript_marker": "PS:"}, POSTSCRIPT_TEST_MESSAGE_1, False),
    (_T + "test_postscript_checker[P.P.S-2]", "detectable_content:postscript",
     {"postscript_marker": "P.P.S"}, POSTSCRIPT_TEST_MESSAGE_2, True),
    (_T + "test_postscript_checker[P.S.-3]", "detectable_content:postscript",
     {"postscript_marker": "P.S."}, POSTSCRIPT_TEST_MESSAGE_3, True),
    (_T + "test_postscript_checker[P.P.S-4]", "detectable_content:postscript",
     {"postscript_marker": "P.P.S"}, POSTSCRIPT_TEST_MESSAGE_4, True),
    (_T + "test_postscript_checker[P.S.-5]", "detectable_content:postscript",
     {"postscript_marker": "P.S."}, POSTSCRIPT_TEST_MESSAGE_5, True),
    (_T + "test_keyword_checker[1]", "keywords:existence", {"keywords": KEYWORDS},
     TEST_INCLUDE_KEYWORD_MESSAGE_1, True),
    (_T + "test_keyword_checker[2]", "keywords:existence", {"keywords": KEYWORDS},
     TEST_INCLUDE_KEYWORD_MESSAGE_2, False),
    (_T + "test_keyword_frequency_checker[1]", "keywords:frequency",
     {"keyword": TEST_KEYWORD_FREQUENCY_KEYWORD_1, "frequency": 4, "relation": LESS},
     TEST_KEYWORD_FREQUNECY_MESSAGE_1, True),
    (_T + "test_keyword_frequency_checker[2]", "keywords:frequency",
     {"keyword": TEST_KEYWORD_FREQUENCY_KEYWORD_1, "frequency": 3, "relation": AT_LEAST},
     TEST_KEYWORD_FREQUNECY_MESSAGE_1, True),
    (_T + "test_keyword_frequency_checker[3]", "keywords:frequency",
     {"keyword": TEST_KEYWORD_FREQUENCY_KEYWORD_2, "frequency": 4, "relation": AT_LEAST},
     TEST_KEYWORD_FREQUNECY_MESSAGE_2, False),
    (_T + "test_num_words_checker[1]", "length_constraints:number_words",
     {"num_words": 8, "relation": LESS}, TEST_NUM_WORDS_MESSAGE_1, True),
    (_T + "test_num_words_checker[2]", "length_constraints:number_words",
     {"num_words": 16, "relation": LESS}, TEST_NUM_WORDS_MESSAGE_2, False),
    (_T + "test_num_words_checker[3]", "length_constraints:number_words",
     {"num_words": 16, "relation": AT_LEAST}, TEST_NUM_WORDS_MESSAGE_2, True),
    (_T + "test_paragraph_first_word[1]", "length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 3, "nth_paragraph": 2, "first_word": "I"},
     PARAGRAPH_FIRST_WORD_TEST_1, True),
    (_T + "test_paragraph_first_word[2]", "length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 3, "nth_paragraph": 2, "first_word": "I"},
     PARAGRAPH_FIRST_WORD_TEST_2, False),
    (_T + "test_paragraph_first_word[3]", "length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 3, "nth_paragraph": 2, "first_word": "I"},
     PARAGRAPH_FIRST_WORD_TEST_3, False),
    (_T + "test_paragraph_first_word[4]", "length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 5, "nth_paragraph": 5, "first_word": "haha"},
     PARAGRAPH_FIRST_WORD_TEST_4, True),
    (_T + "test_paragraph_first_word[5]", "length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 5, "nth_paragraph": 3, "first_word": "Really"},
     PARAGRAPH_FIRST_WORD_TEST_5, True),
    (_T + "test_paragraph_first_word[6]", "length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 5, "nth_paragraph": 3, "first_word": "Really"},
     PARAGRAPH_FIRST_WORD_TEST_6, False),
    (_T + "test_forbidden_words[1-1]", "keywords:forbidden_words",
     {"forbidden_words": FORBIDDEN_WORDS_1}, TEST_FORBIDDEN_WORDS_MESSAGE_1, False),
    (_T + "test_forbidden_words[1-2]", "keywords:forbidden_words",
     {"forbidden_words": FORBIDDEN_WORDS_1}, TEST_FORBIDDEN_WORDS_MESSAGE_2, True),
    (_T + "test_forbidden_words[1-3]", "keywords:forbidden_words",
     {"forbidden_words": FORBIDDEN_WORDS_1}, TEST_FORBIDDEN_WORDS_MESSAGE_3, True),
    (_T + "test_forbidden_words[2-1]", "keywords:forbidden_words",
     {"forbidden_words": FORBIDDEN_WORDS_2}, TEST_FORBIDDEN_WORDS_MESSAGE_1, True),
    (_T + "test_forbidden_words[2-2]", "keywords:forbidden_words",
     {"forbidden_words": FORBIDDEN_WORDS_2}, TEST_FORBIDDEN_WORDS_MESSAGE_2, True),
    (_T + "test_forbidden_words[2-3]", "keywords:forbidden_words",
     {"forbidden_words": FORBIDDEN_WORDS_2}, TEST_FORBIDDEN_WORDS_MESSAGE_3, False),
    (_T + "test_forbidden_words[3-3]", "keywords:forbidden_words",
     {"forbidden_words": FORBIDDEN_WORDS_3}, TEST_FORBIDDEN_WORDS_MESSAGE_3, True),
    (_T + "test_two_responses[1]", "combination:two_responses", {}, TEST_TWO_RESPONSES_1, True),
    (_T + "test_two_responses[2]", "combination:two_responses", {}, TEST_TWO_RESPONSES_2, False),
    (_T + "test_two_responses[3]", "combination:two_responses", {}, TEST_TWO_RESPONSES_3, False),
    (_T + "test_two_responses[4]", "combination:two_responses", {}, TEST_TWO_RESPONSES_4, False),
    (_T + "test_two_responses[5]", "combination:two_responses", {}, TEST_TWO_RESPONSES_5, True),
    (_T + "test_prompt_repeat_answer[1]", "combination:repeat_prompt",
     {"prompt_to_repeat": PROMPT_TO_REPEAT}, TEST_PROMPT_ANSWER_1, True),
    (_T + "test_prompt_repeat_answer[2]", "combination:repeat_prompt",
     {"prompt_to_repeat": PROMPT_TO_REPEAT}, TEST_PROMPT_ANSWER_2, False),
    (_T + "test_end_checker[1]", "startend:end_checker", {"end_phrase": END_PHRASE_1},
     TEST_END_CHECKER_1, True),
    (_T + "test_end_checker[2]", "startend:end_checker", {"end_phrase": END_PHRASE_2},
     TEST_END_CHECKER_2, True),
    (_T + "test_end_checker[3]", "startend:end_checker", {"end_phrase": END_PHRASE_3},
     TEST_END_CHECKER_3, False),
    (_T + "test_title_checker[1]", "detectable_format:title", {}, TEST_TITLE_MESSAGE_1, True),
    (_T + "test_title_checker[2]", "detectable_format:title", {}, TEST_TITLE_MESSAGE_2, True),
    (_T + "test_title_checker[3]", "detectable_format:title", {}, TEST_TITLE_MESSAGE_3, False),
    (_T + "test_title_checker[4]", "detectable_format:title", {}, TEST_TITLE_MESSAGE_4, False),
    (_T + "test_letter_frequency_checker[T]", "keywords:letter_frequency",
     {"letter": "T", "let_frequency": 4, "let_relation": AT_LEAST},
     TEST_LETTER_FREQUENCY_MESSAGE_1, True),
    (_T + "test_letter_frequency_checker[a]", "keywords:letter_frequency",
     {"letter": "a", "let_frequency": 4, "let_relation": LESS},
     TEST_LETTER_FREQUENCY_MESSAGE_2, True),
    (_T + "test_letter_frequency_checker[p]", "keywords:letter_frequency",
     {"letter": "p", "let_frequency": 4, "let_relation": AT_LEAST},
     TEST_LETTER_FREQUENCY_MESSAGE_2, False),
    (_T + "test_letter_frequency_checker_accepts_punctuation[4]", "keywords:letter_frequency",
     {"letter": "#", "let_frequency": 4, "let_relation": AT_LEAST},
     "#one #two #three #four", True),
    (_T + "test_letter_frequency_checker_accepts_punctuation[3]", "keywords:letter_frequency",
     {"letter": "#", "let_frequency": 4, "let_relation": AT_LEAST}, "#one #two #three", False),
    (_T + "test_letter_frequency_checker_rejects_invalid_explicit_args[ab]",
     "keywords:letter_frequency", {"letter": "ab", "let_frequency": 1, "let_relation": AT_LEAST},
     "any answer", "error"),
    (_T + "test_letter_frequency_checker_rejects_invalid_explicit_args[-1]",
     "keywords:letter_frequency", {"letter": "a", "let_frequency": -1, "let_relation": AT_LEAST},
     "any answer", "error"),
    (_T + "test_english_capital_checker[1]", "change_case:english_capital", {},
     TEST_ENGLISH_CAPITAL_1, True),
    (_T + "test_english_capital_checker[2]", "change_case:english_capital", {},
     TEST_ENGLISH_CAPITAL_2, False),
    (_T + "test_english_lowercase_checker[1]", "change_case:english_lowercase", {},
     TEST_ENGLISH_LOWERCASE_1, True),
    (_T + "test_english_lowercase_checker[2]", "change_case:english_lowercase", {},
     TEST_ENGLISH_LOWERCASE_2, False),
    (_T + "test_comma[1]", "punctuation:no_comma", {}, TEST_COMMA_MESSAGE_1, True),
    (_T + "test_comma[2]", "punctuation:no_comma", {}, TEST_COMMA_MESSAGE_2, False),
    (_T + "test_capital_word_frequency[1]", "change_case:capital_word_frequency",
     {"capital_frequency": 3, "capital_relation": AT_LEAST},
     TEST_CAPITAL_WORD_FREQUENCY_MESSAGE_1, True),
    (_T + "test_capital_word_frequency[2]", "change_case:capital_word_frequency",
     {"capital_frequency": 5, "capital_relation": LESS},
     TEST_CAPITAL_WORD_FREQUENCY_MESSAGE_2, True),
    (_T + "test_capital_word_frequency[3]", "change_case:capital_word_frequency",
     {"capital_frequency": 4, "capital_relation": LESS},
     TEST_CAPITAL_WORD_FREQUENCY_MESSAGE_2, False),
    (_T + "test_quotation[1]", "startend:quotation", {}, TEST_QUOTATION_MESSAGE_1, True),
    (_T + "test_quotation[2]", "startend:quotation", {}, TEST_QUOTATION_MESSAGE_2, False),
]

TEST_SENTENCE_SPLIT_1 = """
  Google is a technology company. It was founded in 1998 by Larry Page
and Sergey Brin. Google's mission is to organize the world's information
and make it universally accessible and useful.
  """
TEST_SENTENCE_SPLIT_2 = """
  The U.S.A has many Ph.D. students. They will often haven a .com website
sharing the research that they have done.
  """

_U = "instructions_util_test.py::"
# (name, "words" | "sentences", text, the count the reference's counter returns)
COUNTS = [
    (_U + "test_word_count[1]", "words", "word1, word2, word3, word4.", 4),
    (_U + "test_word_count[2]", "words", """
      Bard can you tell me which is the best optimization method for the
      transition from an hydro-thermal system to an hydro-renewables system""", 24),
    (_U + "test_word_count[3]", "words", """
      Hyphenated-word has two word counts.
      """, 6),
    (_U + "test_count_sentences[1]", "sentences", "xx,x. xx,x! xx/x. x{x}x? x.", 5),
    (_U + "test_count_sentences[2]", "sentences", "xx,x! xxxx. x(x)x?", 3),
    (_U + "test_count_sentences[3]", "sentences", "xxxx. xx,x! xx|x. x&x x?", 4),
    (_U + "test_count_sentences[4]", "sentences", "xx-x]xx,x! x{x}xx,x.", 2),
    # test_sentence_splitter: the expected split, as a count of sentences
    (_U + "test_sentence_splitter[1]", "sentences", TEST_SENTENCE_SPLIT_1, 3),
    (_U + "test_sentence_splitter[2]", "sentences", TEST_SENTENCE_SPLIT_2, 2),
]

NOT_RUNNABLE = {
    _T + "test_language_detection_seed_is_fixed": "tests langdetect's seed; rlvr has no langdetect",
    _T + "test_constrained_start_checker (3 assertions)":
        "multi-turn:constrained_start is not one of IFEval's 25 instructions",
    _T + "test_rephrase_checker (4 assertions)":
        "detectable_format:rephrasing is not one of IFEval's 25 instructions",
    _T + "test_key_sentences (3 assertions)":
        "keywords:key_sentences is not one of IFEval's 25 instructions",
    _T + "test_rephrase_paragraph (5 assertions)":
        "detectable_content:rephrase_paragraph is not one of IFEval's 25 instructions",
    _T + "test_letter_frequency_checker_accepts_punctuation[description]":
        "tests the prompt text build_description writes; rlvr writes no descriptions",
    _T + "test_get_instruction_args": "tests the description builder's round trip",
    _U + "test_generate_keywords": "tests the reference's random keyword generator",
}
